// The step runner's parallel instructions (StepRunner::Impl, step_runner_impl.h): the tensor,
// expert and sequence parallel collectives on activations and their gradients, the pipeline's
// sends and receives, the gradients summed over tp or the tied embedding's group, and the
// checkpoints kept aside and brought back (partition_activations, cpu_checkpointing).
#include <string>

#include "runtime/base/status_macros.h"
#include "runtime/worker/step_runner_impl.h"

namespace ds::worker {

using proto::Instruction;

namespace {

// A collective's source and destination hold one dtype (fp32, or bf16 activations).
Status SameDType(const parallel::BufferView& src, const parallel::BufferView& dst,
                 const proto::ActivationRef& a) {
  if (src.dtype == dst.dtype) return OkStatus();
  return InternalError("\"" + a.name() + "\": the source is " + DTypeName(src.dtype) +
                       ", the destination " + DTypeName(dst.dtype));
}

}  // namespace

// The communicator of the group a tensor-parallel instruction names.
StatusOr<parallel::Communicator*> StepRunner::Impl::Group(const Instruction& in) {
  auto it = p.groups.find(in.collective().group());
  if (it == p.groups.end())
    return FailedPreconditionError("the plan runs " + Instruction::Kind_Name(in.kind()) +
                                   " over group \"" + in.collective().group() +
                                   "\", which this rank was given no communicator for");
  return it->second;
}

// Tensor parallelism: an activation (forward) or its gradient (backward) summed, or maxed, over
// the tp group in place, between two node ranges.
Status StepRunner::Impl::ActAllReduce(int, const Instruction& in) {
  const proto::Collective& c = in.collective();
  DS_ASSIGN_OR_RETURN(parallel::Communicator * comm, Group(in));
  DS_ASSIGN_OR_RETURN(
      parallel::BufferView data,
      compute->TensorData(in, in.activation().tensor(), in.activation().grad(), c.count()));
  return comm->AllReduce(data,
                         c.reduce_max() ? parallel::ReduceOp::kMax : parallel::ReduceOp::kSum);
}

// Sequence parallelism: token chunks gathered into the whole tensor, or the whole partial sums
// reduce-scattered into chunks (values forward, gradients backward), source to destination.
Status StepRunner::Impl::ActGatherScatter(int, const Instruction& in) {
  const proto::Collective& c = in.collective();
  DS_ASSIGN_OR_RETURN(parallel::Communicator * comm, Group(in));
  const bool gather = in.kind() == Instruction::ACT_ALL_GATHER;
  const int64_t chunk = c.count() / comm->size();
  const proto::ActivationRef& a = in.activation();
  DS_ASSIGN_OR_RETURN(parallel::BufferView src,
                      compute->TensorData(in, a.tensor(), a.grad(), gather ? chunk : c.count()));
  DS_ASSIGN_OR_RETURN(parallel::BufferView dst, compute->TensorData(in, a.out_tensor(), a.grad(),
                                                                    gather ? c.count() : chunk));
  DS_RETURN_IF_ERROR(SameDType(src, dst, a));
  if (gather) return comm->AllGather(src, dst);
  return comm->ReduceScatter(src, dst, parallel::ReduceOp::kSum);
}

// Expert parallelism and Ulysses: a buffer's packed blocks (MoE: the step's capacity rows of
// each, which the plan's capacity tensor holds) exchanged over the group, source to destination;
// an async one (an overlap window) is completed by the instruction that wait_for-names it.
Status StepRunner::Impl::ActAllToAll(int index, const Instruction& in) {
  const proto::Collective& c = in.collective();
  const proto::ActivationRef& a = in.activation();
  DS_ASSIGN_OR_RETURN(parallel::Communicator * comm, Group(in));
  int64_t count = c.count();
  if (a.capacity_tensor() >= 0) {
    DS_ASSIGN_OR_RETURN(parallel::BufferView cap,
                        compute->TensorData(in, a.capacity_tensor(), false, 1));
    if (cap.dtype != DType::kF32)
      return InternalError("the capacity of \"" + a.name() + "\" is not an fp32 value");
    const int64_t rows = static_cast<int64_t>(*static_cast<const float*>(cap.data));
    if (rows < 0 || rows > a.block_rows())
      return InternalError("the all-to-all of \"" + a.name() + "\" got capacity " +
                           std::to_string(rows) + " for " + std::to_string(a.block_rows()) +
                           " rows per block");
    count = c.count() / (a.block_rows() * a.row_elements()) * rows * a.row_elements();
  }
  DS_ASSIGN_OR_RETURN(parallel::BufferView from,
                      compute->TensorData(in, a.tensor(), a.grad(), c.count()));
  DS_ASSIGN_OR_RETURN(parallel::BufferView to,
                      compute->TensorData(in, a.out_tensor(), a.grad(), c.count()));
  DS_RETURN_IF_ERROR(SameDType(from, to, a));
  from.count = count, to.count = count;
  if (!in.async()) return comm->AllToAll(from, to);  // on this thread, no hand-over
  zero::CollectiveJob job;
  job.handle = comm->AllToAllAsync(from, to);
  return zero->Track(index, true, std::move(job));
}

// Sequence parallelism: the gradients of parameters used on token chunks, summed over tp.
Status StepRunner::Impl::TpGrads(int, const Instruction& in) {
  DS_ASSIGN_OR_RETURN(parallel::Communicator * comm, Group(in));
  return zero->ReduceGrads(in, comm);
}

// A pipeline's tied parameters, summed over the first and last stage.
Status StepRunner::Impl::TiedGrads(int, const Instruction& in) {
  DS_ASSIGN_OR_RETURN(parallel::Communicator * comm, Group(in));
  return zero->ReduceTied(in, comm);
}

// Pipeline parallelism: an activation or gradient of the instruction's chunk and slot to or
// from the neighbouring stage over its link group (two ranks: the peer is the other one), on
// the link's thread; the instruction that wait_for-names it completes it.
Status StepRunner::Impl::PointToPoint(int index, const Instruction& in) {
  const proto::Collective& c = in.collective();
  DS_ASSIGN_OR_RETURN(parallel::Communicator * comm, Group(in));
  if (comm->size() != 2)
    return FailedPreconditionError("the plan runs " + Instruction::Kind_Name(in.kind()) +
                                   " over group \"" + c.group() + "\" of " +
                                   std::to_string(comm->size()) + " ranks; a link has 2");
  DS_ASSIGN_OR_RETURN(
      const parallel::BufferView view,
      compute->TensorData(in, in.activation().tensor(), in.activation().grad(), c.count()));
  const int peer = 1 - comm->rank();
  zero::CollectiveJob job;
  job.handle = in.kind() == Instruction::SEND ? comm->SendAsync(view, peer, 0)
                                              : comm->RecvAsync(view, peer, 0);
  return zero->Track(index, in.async(), std::move(job));
}

// partition_activations: this rank's slice of a checkpoint kept aside after forward, and the
// tp group's slices gathered back into the whole tensor before its segment's recompute;
// cpu_checkpointing: the whole tensor kept in host memory, copied back (Reload).
Status StepRunner::Impl::Stash(int, const Instruction& in) {
  return compute->StashCheckpoint(in, in.activation().tensor());
}

Status StepRunner::Impl::Reload(int, const Instruction& in) {
  return compute->RestoreCheckpoint(in, in.activation().tensor());
}

Status StepRunner::Impl::Restore(int, const Instruction& in) {
  const proto::Collective& c = in.collective();
  DS_ASSIGN_OR_RETURN(parallel::Communicator * comm, Group(in));
  const int64_t slice = c.count() / comm->size();
  DS_ASSIGN_OR_RETURN(float* src, compute->CheckpointSlice(in, in.activation().tensor(), slice));
  DS_ASSIGN_OR_RETURN(parallel::BufferView dst,
                      compute->TensorData(in, in.activation().tensor(), false, c.count()));
  const parallel::BufferView from(src, slice);
  DS_RETURN_IF_ERROR(SameDType(from, dst, in.activation()));  // the slices are fp32
  return comm->AllGather(from, dst);
}

}  // namespace ds::worker
