#include "runtime/graph/graph_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include "proto/graph.pb.h"
#include "runtime/base/status_macros.h"
#include "runtime/core/proto_dtype.h"

namespace ds {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Collects text-format parse errors with line and column.
class ErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (first_.empty())
      first_ =
          "line " + std::to_string(line + 1) + ":" + std::to_string(column + 1) + ": " + message;
  }
  const std::string& first() const { return first_; }

 private:
  std::string first_;
};

// Tensor name to its index in Graph::tensors.
using TensorIndex = std::map<std::string, int>;

// The shape of tensor `t`; `where` names the tensor in errors.
StatusOr<SymShape> ShapeFromProto(const proto::TensorDef& t, const std::string& where) {
  SymShape shape;
  for (const proto::Dim& d : t.shape()) {
    if (d.kind_case() == proto::Dim::kSymbol)
      shape.push_back(Dim::Sym(d.symbol()));
    else if (d.size() > 0)
      shape.push_back(Dim::Fixed(d.size()));
    else
      return InvalidArgumentError(where + ": dimension " + std::to_string(d.size()) +
                                  " must be positive or a symbol");
  }
  return shape;
}

// The role of tensor `t`; a missing or unknown role is an error naming `where`.
StatusOr<TensorRole> RoleFromProto(const proto::TensorDef& t, const std::string& where) {
  switch (t.role()) {
    case proto::PARAM:
      return TensorRole::kParam;
    case proto::INPUT:
      return TensorRole::kInput;
    case proto::TARGET:
      return TensorRole::kTarget;
    case proto::FROZEN:
      return TensorRole::kFrozen;
    case proto::ACTIVATION:
      return TensorRole::kActivation;
    case proto::STATE:
      return TensorRole::kState;
    default:
      return InvalidArgumentError(where + ": missing role (param/input/target/activation/state)");
  }
}

// One declared tensor: name, shape, dtype, role, initializer and sharding hint.
StatusOr<TensorInfo> TensorFromProto(const proto::TensorDef& t, const std::string& source) {
  TensorInfo info;
  info.name = t.name();
  std::string where = source + ": tensor \"" + t.name() + "\"";
  if (info.name.empty()) return InvalidArgumentError(source + ": a tensor has no name");
  DS_ASSIGN_OR_RETURN(info.shape, ShapeFromProto(t, where));
  DS_ASSIGN_OR_RETURN(info.dtype, FromProtoDType(t.dtype(), where));
  DS_ASSIGN_OR_RETURN(info.role, RoleFromProto(t, where));
  const proto::Initializer& in = t.init();
  info.init.kind = static_cast<InitSpec::Kind>(in.kind());
  info.init.mean = in.mean();
  info.init.std = in.std();
  info.init.low = in.low();
  info.init.high = in.high();
  info.init.value = in.value();
  info.sharding = static_cast<ShardKind>(t.sharding().kind());
  return info;
}

// Tensor name to index over g's tensors; a name declared twice is an error.
StatusOr<TensorIndex> IndexTensors(const Graph& g, const std::string& source) {
  TensorIndex index;
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    if (!index.emplace(g.tensors[i].name, static_cast<int>(i)).second)
      return InvalidArgumentError(source + ": tensor \"" + g.tensors[i].name + "\" declared twice");
  }
  return index;
}

// The indices of the tensors `names` (a node's inputs or outputs, `what` saying which).
Status ResolveTensors(const google::protobuf::RepeatedPtrField<std::string>& names,
                      const TensorIndex& index, const std::string& where, const char* what,
                      std::vector<int>* out) {
  for (const std::string& name : names) {
    auto it = index.find(name);
    if (it == index.end())
      return InvalidArgumentError(where + ": " + what + " \"" + name +
                                  "\" is not a declared tensor");
    out->push_back(it->second);
  }
  return OkStatus();
}

// Node n's attributes into `attrs`; an attribute without a value is an error.
Status AttrsFromProto(const proto::NodeDef& n, const std::string& where, kernels::Attrs* attrs) {
  for (const auto& [k, v] : n.attrs()) {
    switch (v.value_case()) {
      case proto::AttrValue::kI:
        attrs->SetInt(k, v.i());
        break;
      case proto::AttrValue::kF:
        attrs->SetFloat(k, v.f());
        break;
      case proto::AttrValue::kS:
        attrs->SetString(k, v.s());
        break;
      default:
        return InvalidArgumentError(where + ": attribute \"" + k + "\" has no value");
    }
  }
  return OkStatus();
}

// One node, its inputs and outputs resolved to tensor indices through `index`.
StatusOr<NodeInfo> NodeFromProto(const proto::NodeDef& n, const TensorIndex& index,
                                 const std::string& source) {
  NodeInfo node;
  node.name = n.name();
  node.op = n.op();
  node.block = n.block();
  std::string where = source + ": node \"" + n.name() + "\" (" + n.op() + ")";
  DS_RETURN_IF_ERROR(ResolveTensors(n.inputs(), index, where, "input", &node.inputs));
  DS_RETURN_IF_ERROR(ResolveTensors(n.outputs(), index, where, "output", &node.outputs));
  DS_RETURN_IF_ERROR(AttrsFromProto(n, where, &node.attrs));
  return node;
}

StatusOr<Graph> FromProto(const proto::GraphDef& p, const std::string& source) {
  Graph g;
  g.name = p.name();
  g.family = p.family();
  g.num_blocks = p.num_blocks();
  for (const auto& [k, v] : p.config()) g.config[k] = v;
  for (const proto::TensorDef& t : p.tensors()) {
    DS_ASSIGN_OR_RETURN(TensorInfo info, TensorFromProto(t, source));
    g.tensors.push_back(std::move(info));
  }
  DS_ASSIGN_OR_RETURN(const TensorIndex index, IndexTensors(g, source));
  for (const proto::NodeDef& n : p.nodes()) {
    DS_ASSIGN_OR_RETURN(NodeInfo node, NodeFromProto(n, index, source));
    g.nodes.push_back(std::move(node));
  }
  if (!p.loss().empty()) {
    auto it = index.find(p.loss());
    if (it == index.end())
      return InvalidArgumentError(source + ": loss \"" + p.loss() + "\" is not a declared tensor");
    g.loss = it->second;
  }
  return g;
}

// `role` into d; a value outside the enum leaves d's role unset.
void SetProtoRole(TensorRole role, proto::TensorDef* d) {
  switch (role) {
    case TensorRole::kParam:
      d->set_role(proto::PARAM);
      break;
    case TensorRole::kInput:
      d->set_role(proto::INPUT);
      break;
    case TensorRole::kTarget:
      d->set_role(proto::TARGET);
      break;
    case TensorRole::kActivation:
      d->set_role(proto::ACTIVATION);
      break;
    case TensorRole::kState:
      d->set_role(proto::STATE);
      break;
    case TensorRole::kFrozen:
      d->set_role(proto::FROZEN);
      break;
  }
}

// One tensor into d; weights (param, frozen) also get their initializer and sharding hint.
void TensorToProto(const TensorInfo& t, proto::TensorDef* d) {
  d->set_name(t.name);
  for (const Dim& dim : t.shape) {
    if (dim.symbol.empty())
      d->add_shape()->set_size(dim.size);
    else
      d->add_shape()->set_symbol(dim.symbol);
  }
  d->set_dtype(ToProtoDType(t.dtype));
  SetProtoRole(t.role, d);
  if (t.role == TensorRole::kParam || t.role == TensorRole::kFrozen) {
    proto::Initializer* in = d->mutable_init();
    in->set_kind(static_cast<proto::Initializer::Kind>(t.init.kind));
    in->set_mean(t.init.mean);
    in->set_std(t.init.std);
    in->set_low(t.init.low);
    in->set_high(t.init.high);
    in->set_value(t.init.value);
    if (t.sharding != ShardKind::kNone)
      d->mutable_sharding()->set_kind(static_cast<proto::ShardingHint::Kind>(t.sharding));
  }
}

// One node of g into d, its tensors by name.
void NodeToProto(const Graph& g, const NodeInfo& n, proto::NodeDef* d) {
  d->set_name(n.name);
  d->set_op(n.op);
  d->set_block(n.block);
  for (int i : n.inputs) d->add_inputs(g.tensors[i].name);
  for (int o : n.outputs) d->add_outputs(g.tensors[o].name);
  auto& attrs = *d->mutable_attrs();
  for (const auto& [k, v] : n.attrs.ints()) attrs[k].set_i(v);
  for (const auto& [k, v] : n.attrs.floats()) attrs[k].set_f(static_cast<float>(v));
  for (const auto& [k, v] : n.attrs.strings()) attrs[k].set_s(v);
}

void ToProto(const Graph& g, proto::GraphDef* p) {
  p->set_name(g.name);
  p->set_family(g.family);
  p->set_num_blocks(g.num_blocks);
  for (const auto& [k, v] : g.config) (*p->mutable_config())[k] = v;
  for (const TensorInfo& t : g.tensors) TensorToProto(t, p->add_tensors());
  for (const NodeInfo& n : g.nodes) NodeToProto(g, n, p->add_nodes());
  if (g.loss >= 0) p->set_loss(g.tensors[g.loss].name);
}

}  // namespace

StatusOr<Graph> ParseGraphText(const std::string& text, const std::string& source) {
  proto::GraphDef p;
  google::protobuf::TextFormat::Parser parser;
  ErrorCollector errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &p))
    return InvalidArgumentError(source + ": not a valid text graph: " + errors.first());
  return FromProto(p, source);
}

StatusOr<Graph> LoadGraph(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError(path + ": cannot open graph file");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string data = ss.str();
  if (EndsWith(path, ".pbtxt") || EndsWith(path, ".txtpb")) return ParseGraphText(data, path);
  proto::GraphDef p;
  if (!p.ParseFromString(data))
    return InvalidArgumentError(path +
                                ": not a valid binary graph (expected a GraphDef; "
                                "text graphs need the .pbtxt extension)");
  return FromProto(p, path);
}

Status SaveGraph(const Graph& graph, const std::string& path) {
  proto::GraphDef p;
  ToProto(graph, &p);
  std::string data;
  if (EndsWith(path, ".pbtxt") || EndsWith(path, ".txtpb")) {
    google::protobuf::TextFormat::Printer printer;
    if (!printer.PrintToString(p, &data))
      return InternalError(path + ": text serialization failed");
  } else if (!p.SerializeToString(&data)) {
    return InternalError(path + ": serialization failed");
  }
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return ErrnoToStatus(errno, "open(" + tmp + ")");
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      return ErrnoToStatus(errno, "write(" + tmp + ")");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    return ErrnoToStatus(err, "rename(" + tmp + ", " + path + ")");
  }
  return OkStatus();
}

}  // namespace ds
