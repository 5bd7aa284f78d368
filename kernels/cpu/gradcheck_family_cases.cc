// Gradient checks of the ops and attributes the Hugging Face families added (runtime/hf):
// relu, gelu_erf, scale, softcap, head_rmsnorm; rmsnorm's unit_offset; the scaled and partial
// RoPE variants; attention's window, softcap and scale; position_embedding's offset. The
// cases of an op that already has some run after them (gradcheck_test.cc).
#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <utility>

#include "kernels/cpu/gradcheck_util.h"

namespace ds::kernels::testing {
namespace {

// Appends `more` to the cases the table already has for `op`.
void Extend(GradcheckTable* t, const std::string& op, std::function<void()> more) {
  std::function<void()> before = t->count(op) ? t->at(op) : std::function<void()>();
  (*t)[op] = [before, more] {
    if (before) before();
    more();
  };
}

void Pointwise(GradcheckTable* t) {
  (*t)["relu"] = [] {  // values away from the kink at 0
    std::mt19937 rng(21);
    OwnedTensor x = RandomTensor({3, 17}, rng, -3, 3);
    for (int64_t i = 0; i < x.view().numel(); ++i)
      if (std::abs(x.f32()[i]) < 0.05f) x.f32()[i] = 0.5f;
    CheckGradients({"relu", {}, Inputs(std::move(x))});
  };
  (*t)["gelu_erf"] = [] {
    std::mt19937 rng(22);
    CheckGradients({"gelu_erf", {}, Inputs(RandomTensor({3, 17}, rng, -3, 3))});
  };
  (*t)["scale"] = [] {
    std::mt19937 rng(23);
    Attrs a;
    a.SetFloat("factor", 5.656854);
    CheckGradients({"scale", a, Inputs(RandomTensor({2, 9}, rng))});
  };
  (*t)["softcap"] = [] {  // inputs past the cap, where tanh bends
    std::mt19937 rng(24);
    Attrs a;
    a.SetFloat("cap", 3.0);
    CheckGradients({"softcap", a, Inputs(RandomTensor({2, 9}, rng, -6, 6))});
  };
}

void Norms(GradcheckTable* t) {
  (*t)["head_rmsnorm"] = [] {  // H 4, Hkv 2, D 8: q and k heads normalized, v passed
    std::mt19937 rng(25);
    Attrs a = HeadAttrs(4, 2);
    a.SetFloat("eps", 1e-6);
    CheckGradients({"head_rmsnorm", a,
                    Inputs(RandomTensor({2, 3, 8 * 8}, rng, -2, 2), RandomTensor({8}, rng),
                           RandomTensor({8}, rng))});
  };
  Extend(t, "rmsnorm", [] {  // Gemma's (1 + w)
    std::mt19937 rng(26);
    Attrs a;
    a.SetInt("unit_offset", 1);
    CheckGradients(
        {"rmsnorm", a, Inputs(RandomTensor({5, 16}, rng, -2, 2), RandomTensor({16}, rng))});
  });
}

// Each RoPE variant on H 4, Hkv 2, D 16 (8 pairs) over 12 positions, where the dynamic one's
// length (12) exceeds its max_positions (8).
void Rope(GradcheckTable* t) {
  Extend(t, "rope", [] {
    std::mt19937 rng(27);
    auto attrs = [](const char* type) {
      Attrs a = HeadAttrs(4, 2);
      a.SetString("rope_type", type);
      a.SetFloat("theta", 500.0);
      a.SetFloat("factor", 4.0);
      a.SetInt("original_max", 8);
      a.SetInt("max_positions", 8);
      return a;
    };
    for (const char* type : {"linear", "dynamic", "llama3", "yarn"}) {
      INFO("rope_type " << type);
      Attrs a = attrs(type);
      if (std::string(type) == "yarn") a.SetFloat("attention_factor", 1.1386);
      CheckGradients({"rope", a, Inputs(RandomTensor({2, 12, 8 * 16}, rng))});
    }
    Attrs partial = HeadAttrs(4, 2);  // GPT-NeoX: 4 of 16 dims rotate
    partial.SetInt("rotary_dim", 4);
    CheckGradients({"rope", partial, Inputs(RandomTensor({2, 6, 8 * 16}, rng))});
  });
}

// Windows inside a block and across blocks (T 150 > 2 blocks of 64), a soft cap that bends the
// scaled-up scores, a scale of its own.
void Attention(GradcheckTable* t) {
  Extend(t, "attention", [] {
    std::mt19937 rng(28);
    for (int64_t window : {3, 70}) {
      INFO("window " << window);
      Attrs a = HeadAttrs(4, 2);
      a.SetInt("window", window);
      CheckGradients({"attention", a, Inputs(RandomTensor({1, 150, 8 * 8}, rng, -2, 2))});
    }
    Attrs capped = HeadAttrs(4, 2);
    capped.SetFloat("softcap", 2.0);
    capped.SetFloat("scale", 0.5);
    capped.SetInt("window", 4);
    CheckGradients({"attention", capped, Inputs(RandomTensor({2, 9, 8 * 8}, rng, -2, 2))});
    CheckGradients({"attention", capped,  // with left pads
                    Inputs(RandomTensor({2, 9, 8 * 8}, rng, -2, 2), IntTensor({2}, {3, 0}))});
  });
  Extend(t, "position_embedding", [] {  // OPT: position p reads row p + 2
    std::mt19937 rng(29);
    Attrs a;
    a.SetInt("offset", 2);
    CheckGradients(
        {"position_embedding", a, Inputs(RandomTensor({2, 5, 6}, rng), RandomTensor({8, 6}, rng))});
    CheckGradients({"position_embedding", a,
                    Inputs(RandomTensor({2, 3, 6}, rng), RandomTensor({8, 6}, rng),
                           IntTensor({2, 3}, {0, 0, 1, 3, 4, 5}))});
  });
}

}  // namespace

void AddFamilyChecks(GradcheckTable* t) {
  Pointwise(t);
  Norms(t);
  Rope(t);
  Attention(t);
}

}  // namespace ds::kernels::testing
