// Package-private: the section parsers behind ParseJobConfig. Each reads its block from the
// root reader, validates it, and Finish()es the block (errors are sticky in the context).
#pragma once

#include <string>

#include "runtime/config/config_reader.h"
#include "runtime/config/job_config.h"

namespace ds::config::internal {

// DeepSpeed blocks (deepspeed_sections.cc).
void ParseOptimizer(MapReader& root, OptimizerConfig* out);
void ParseScheduler(MapReader& root, SchedulerConfig* out);
void ParsePrecision(MapReader& root, Fp16Config* fp16, Bf16Config* bf16);
void ParseZero(MapReader& root, ZeroConfig* out);
void ParseAio(MapReader& root, AioConfig* out);

// Our blocks (our_sections.cc).
void ParseModel(MapReader& root, ModelConfig* out);
void ParseRlhf(MapReader& root, std::string* chat, std::string* step);
void ParseHybridEngine(MapReader& root, HybridEngineConfig* out);
void ParseData(MapReader& root, uint64_t job_seed, DataConfig* out);
void ParseCheckpoint(MapReader& root, CheckpointConfig* out);
void ParseMonitor(MapReader& root, MonitorConfig* out);
// fault_tolerance (fault_tolerance_section.cc).
void ParseFaultTolerance(MapReader& root, FaultToleranceConfig* out);
// DeepSpeed's elasticity block (fault_tolerance_section.cc; the rule in elasticity.h).
void ParseElasticity(MapReader& root, ElasticityConfig* out);
// DeepSpeed's tensorboard / csv_monitor blocks into `out`; wandb / comet warn
// (monitor_sections.cc).
void ParseDeepSpeedMonitor(MapReader& root, MonitorConfig* out);
void ParseTraining(MapReader& root, int64_t* train_iters, RecomputeConfig* recompute);
void ParseActivationCheckpointing(MapReader& root, RecomputeConfig* recompute);
void ParseDevice(MapReader& root, DeviceConfig* out);
// Returns whether parallel.tensor was given (tensor_parallel.autotp_size must then agree).
bool ParseParallel(MapReader& root, ParallelConfig* out);
void ParsePipeline(MapReader& root, PipelineConfig* out, ParallelConfig* parallel,
                   bool parallel_pipeline_given);
void ParseTensorParallel(MapReader& root, ParallelConfig* out, bool parallel_tensor_given);

// ASCII lower case, for case-insensitive names.
std::string Lower(std::string s);

}  // namespace ds::config::internal
