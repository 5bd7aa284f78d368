#include "runtime/generate/hf_model.h"

#include <vector>

#include "runtime/base/status_macros.h"
#include "runtime/ckpt/hf_params.h"
#include "runtime/ckpt/hf_weights.h"
#include "runtime/hf/hf_config.h"
#include "runtime/hf/hf_tensor_map.h"

namespace ds::generate {

StatusOr<HfModel> LoadHfModel(const std::string& dir) {
  HfModel m;
  DS_ASSIGN_OR_RETURN(m.spec, hf::LoadHfSpec(dir));
  DS_ASSIGN_OR_RETURN(m.graph, BuildModelGraph(m.spec));
  DS_ASSIGN_OR_RETURN(hf::HfTensorMap map, hf::MapHfTensors(m.spec, m.graph));
  // model.safetensors, or the shards of model.safetensors.index.json, mapped (no copy).
  DS_ASSIGN_OR_RETURN(ckpt::HfWeights files, ckpt::HfWeights::Open(dir));
  DS_ASSIGN_OR_RETURN(ckpt::HfParamReader reader,
                      ckpt::HfParamReader::Create(&files, std::move(map)));
  m.params = std::make_unique<zero::ParamStore>(m.graph, DType::kF32);
  std::vector<float> full(m.params->total_elements(), 0.0f);
  for (size_t i = 0; i < reader.map().params.size(); ++i) {
    const hf::HfParam& p = reader.map().params[i];
    const zero::ParamSlot* slot = m.params->Find(p.ours);
    if (!slot || slot->numel != NumElements(p.shape))
      return InternalError("the graph of " + dir + " has no parameter " + p.ours);
    DS_RETURN_IF_ERROR(reader.Read(i, 0, slot->numel, full.data() + slot->offset));
  }
  m.params->SetFromFull(full.data());
  return m;
}

}  // namespace ds::generate
