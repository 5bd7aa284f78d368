// ds-ckpt: inspect, verify and convert ds-runtime checkpoints (README.md in this directory).
//
//   ds-ckpt import --family gpt2 --input hf.safetensors --output weights.safetensors
//   ds-ckpt export --family llama --n_head 4 --n_kv_head 2 --input CKPT --output hf.safetensors
//   ds-ckpt inspect CKPT
//   ds-ckpt verify CKPT
//   ds-ckpt consolidate CKPT full.safetensors

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "runtime/base/logging.h"
#include "tools/ds_ckpt/commands.h"

namespace {

int Fail(const ds::Status& s) {
  DS_LOG_ERROR("tools", "{}", s.ToString());
  return 1;
}

void AddConvertFlags(CLI::App* cmd, ds::tools::ConvertOptions* o, const char* input_help,
                     bool family_required) {
  CLI::Option* family = cmd->add_option(
      "--family", o->family,
      family_required ? "model family" : "model family (not with --config of a model.hf job)");
  family->check(CLI::IsMember({"gpt2", "llama"}));
  if (family_required) family->required();
  cmd->add_option("--input", o->input, input_help)->required();
  cmd->add_option("--output", o->output, "safetensors file to write")->required();
  cmd->add_option("--dtype", o->dtype, "float dtype of the output: f32, bf16, f16")
      ->default_val("f32");
  cmd->add_option("--n_head", o->n_head, "llama: attention heads (0 = infer from shapes)")
      ->default_val(0);
  cmd->add_option("--n_kv_head", o->n_kv_head, "llama: key/value heads (0 = infer)")
      ->default_val(0);
}

// export's own flags: the Hub folder layout.
void AddExportFlags(CLI::App* exp, ds::tools::ConvertOptions* o) {
  exp->add_option("--max_shard_size", o->max_shard_size,
                  "write --output as a folder the way transformers' save_pretrained shards it: "
                  "model.safetensors, or shards of at most this size (5GB, 500MB, 2GiB, bytes) "
                  "and model.safetensors.index.json");
  exp->add_option("--config", o->config,
                  "a job file: --output becomes a Hugging Face folder with config.json from its "
                  "model section (transformers' keys), shards of --max_shard_size (default 5GB); "
                  "a model.hf job's folder is written as its family stores it, with the "
                  "original config.json and tokenizer files");
}

// consolidate CHECKPOINT OUT, or with --input / --output.
int Consolidate(ds::tools::ConsolidateOptions o, const std::string& in, const std::string& out) {
  if (!in.empty()) o.input = in;
  if (!out.empty()) o.output = out;
  if (o.input.empty() || o.output.empty()) {
    std::fprintf(stderr, "usage: ds-ckpt consolidate CHECKPOINT OUT.safetensors\n");
    return 2;
  }
  ds::Status s = ds::tools::RunConsolidate(o);
  return s.ok() ? 0 : Fail(s);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ds-ckpt: inspect, verify and convert ds-runtime checkpoints"};
  app.require_subcommand(1);

  ds::tools::ConvertOptions import_opts;
  CLI::App* imp = app.add_subcommand("import", "Hugging Face safetensors -> our names/layouts");
  AddConvertFlags(imp, &import_opts,
                  "HF .safetensors, *.safetensors.index.json, or a directory with either", true);

  ds::tools::ConvertOptions export_opts;
  CLI::App* exp = app.add_subcommand("export", "our weights -> Hugging Face safetensors");
  AddConvertFlags(exp, &export_opts, "our .safetensors, or a checkpoint root / step directory",
                  false);
  AddExportFlags(exp, &export_opts);

  std::string inspect_path;
  CLI::App* ins = app.add_subcommand("inspect", "Verify and describe a checkpoint");
  ins->add_option("checkpoint", inspect_path, "checkpoint root, step dir or .safetensors")
      ->required();

  std::string verify_path;
  CLI::App* ver = app.add_subcommand("verify", "Verify every checksum; non-zero exit on error");
  ver->add_option("checkpoint", verify_path, "checkpoint root or step dir")->required();

  // See Note [consolidate] in commands.cc.
  ds::tools::ConsolidateOptions consolidate_opts;
  std::string con_in, con_out;
  CLI::App* con = app.add_subcommand(
      "consolidate",
      "Write a checkpoint's weights (consolidated or one shard file per rank) as one fp32 "
      "safetensors file, one parameter at a time (zero_to_fp32)");
  con->add_option("checkpoint", con_in, "checkpoint root (follows latest) or step directory");
  con->add_option("output", con_out, "safetensors file to write");
  con->add_option("--input", consolidate_opts.input, "same as the first argument");
  con->add_option("--output", consolidate_opts.output, "same as the second argument");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (imp->parsed()) {
    ds::Status s = ds::tools::RunImport(import_opts);
    return s.ok() ? 0 : Fail(s);
  }
  if (exp->parsed()) {
    ds::Status s = ds::tools::RunExport(export_opts);
    return s.ok() ? 0 : Fail(s);
  }
  if (con->parsed()) return Consolidate(consolidate_opts, con_in, con_out);
  ds::StatusOr<std::string> text = ins->parsed() ? ds::tools::InspectCheckpoint(inspect_path)
                                                 : ds::tools::VerifyCheckpoint(verify_path);
  if (!text.ok()) return Fail(text.status());
  std::printf("%s%s", text->c_str(), text->back() == '\n' ? "" : "\n");
  return 0;
}
