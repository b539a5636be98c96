// dsv4-verify synth -o FILE: a capture made by the oracle (verify/replay/synth.h).
#include <fmt/format.h>
#include <fmt/ostream.h>

#include <exception>

#include "verify/capture/writer.h"
#include "verify/cli/commands.h"

namespace dsv4::verify::cli {

CLI::App* add_synth(CLI::App& app, SynthArgs& a) {
  CLI::App* c = app.add_subcommand(
      "synth",
      "Write a capture made by the CPU oracle: random weights on the checkpoint's grids, a random bf16 input, a "
      "prefill then one-token decodes over a batch; every stage dataset and the cache/ datasets before each call. "
      "The same arguments give the same datasets.");
  SynthOptions& o = a.options;
  c->add_option("--config", o.config, "model dims: tiny (default), flash or pro")
      ->check(CLI::IsMember({"tiny", "flash", "pro"}));
  c->add_option("--ratio", o.ratios, "compress ratio of each layer, layer i gets the i-th (0, 4, 128; e.g. 0,4,128)")
      ->delimiter(',')
      ->check(CLI::IsMember({0, 4, 128}));
  c->add_option("--prefill", o.prefill, "tokens of the prefill call (default 13)");
  c->add_option("--decode", o.decode, "one-token decode calls after the prefill (default 6)");
  c->add_option("--calls", o.calls,
                "token counts of the calls instead of --prefill/--decode, e.g. 13,5,1 (a prefill, a chunked "
                "continuation, a decode)")
      ->delimiter(',');
  c->add_option("--batch", o.batch, "sequences (default 2)");
  c->add_option("--seed", o.seed, "seed of the weights and inputs (default 1)");
  c->add_option("--precision", o.precision, "precision policy the oracle runs (default official)");
  c->add_flag("!--no-cache", o.cache, "leave out the cache/ datasets (replay then derives the state)");
  c->add_flag("!--no-pre-quant", o.pre_quant,
              "leave out the pre_quant/ datasets (the values before the final FP8/FP4 rounding)");
  c->add_option_function<std::string>(
      "--inject-bug", [&o](const std::string& name) { o.mutation = ref::Mutation::parse(name); },
      "make a capture a verifier must fail: the oracle computes stage STAGE with bug BUG (STAGE:BUG, e.g. "
      "indexer/q:ties-toward-zero; `dsv4-verify mutations` lists them, docs/math.md \"Numerics variants\")");
  c->add_flag("--quantization-edges", o.quantization_edges,
              "weights that put the quantizers on an edge, blocks with amax below 1e-4: indexer head 0's query "
              "weights and the first 64 norm weights of kv and of the compressor scaled by 2^-16");
  c->add_option("-o,--output", a.output, "the capture file to write (whole or not at all)")->required();
  return c;
}

int run_synth(const SynthArgs& a, Io io) {
  try {
    const Capture capture = synthesize_capture(a.options);
    hdf5::WriteOptions options;
    options.compress = true;
    options.gzip_level = 9;
    write_capture(a.output, capture, options);
    fmt::print(io.out, "wrote {}: {} layer{}, {} calls each, batch {}\n", a.output, capture.layers.size(),
               capture.layers.size() == 1 ? "" : "s", capture.layers.begin()->second.calls.size(), a.options.batch);
  } catch (const std::exception& e) {
    fmt::print(io.err, "dsv4-verify synth: {}\n", e.what());
    return kExitBadInput;
  }
  return kExitPass;
}

}  // namespace dsv4::verify::cli
