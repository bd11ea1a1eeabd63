// libFuzzer target: the parser must never crash, and the canonical print of whatever it accepts
// must be a fixed point (print(parse(print(n))) == print(n)).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "spikejit/error.h"
#include "spikejit/frontend.h"

namespace {

// Parses `text`; if accepted, checks that its canonical text is a fixed point. __builtin_trap is
// how a libFuzzer target reports a broken invariant.
void check(std::string_view text) {
  std::string printed;
  try {
    printed = spikejit::frontend::print(spikejit::frontend::parse(text, "fuzz"));
  } catch (const spikejit::ParseError&) {
    return;  // rejected input: fine, as long as it did not crash
  }
  std::string again;
  try {
    again = spikejit::frontend::print(spikejit::frontend::parse(printed, "canonical"));
  } catch (const spikejit::Error&) {
    __builtin_trap();
  }
  if (again != printed) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  check(text);
  // The same bytes as the body of a complete neuron, so that most well-formed lines are accepted
  // and reach the printer.
  check("neuron f\ninput x, y\nstate v = 0.5\nconst c = 2, b = true\nparam w, p[neuron] = 1\n"
        "output o\n" + std::string(text) + "\nv = 0\no = 0\n");
  return 0;
}
