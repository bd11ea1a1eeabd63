#include "cli.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "spikejit/builtins.h"
#include "spikejit/error.h"
#include "spikejit/frontend.h"

namespace spikejit::cli {
namespace {

bool contains(const std::vector<std::string>& list, const std::string& s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

ir::Neuron builtin_neuron(const std::string& name) {
  if (name == "if") return builtins::if_neuron();
  if (name == "lif") return builtins::lif_neuron();
  if (name == "plif") return builtins::plif_neuron();
  throw Error("unknown built-in neuron 'builtin:" + name +
              "'; the built-ins are builtin:if, builtin:lif and builtin:plif");
}

// A number as the neuron text format writes one, with an optional '-': digits, a fraction, an
// exponent; no hex, spaces or '+', and nothing that overflows or rounds to 0 on the way.
bool read_number(const std::string& text, double* out) {
  const size_t start = !text.empty() && text[0] == '-' ? 1 : 0;
  size_t i = start, digits = 0;
  const auto skip_digits = [&] {
    size_t n = 0;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i, ++n;
    return n;
  };
  digits += skip_digits();
  if (i < text.size() && text[i] == '.') {
    ++i;
    digits += skip_digits();
  }
  if (digits == 0) return false;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    if (skip_digits() == 0) return false;
  }
  if (i != text.size()) return false;
  const auto [end, error] = std::from_chars(text.data() + start, text.data() + text.size(), *out);
  if (error != std::errc() || end != text.data() + text.size() || !std::isfinite(*out)) return false;
  if (start) *out = -*out;
  return true;
}

ir::ConstantOverride parse_override(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) {
    throw UsageError("--set expects NAME=VALUE, got '" + text + "'");
  }
  const std::string name = text.substr(0, eq), value = text.substr(eq + 1);
  if (value == "true") return {name, 1.0};
  if (value == "false") return {name, 0.0};
  double v = 0.0;
  if (!read_number(value, &v)) {
    throw UsageError("--set " + name + ": expected a number as the text format writes one (an optional '-', digits, "
                     "a fraction, an exponent), true or false, got '" + value + "'");
  }
  return {name, v};
}

}  // namespace

const char* const kNeuronSourceHelp =
    "  FILE             a neuron text file, or builtin:if, builtin:lif, builtin:plif\n"
    "  --set NAME=VALUE override a constant of the neuron (repeatable), e.g. --set tau=5\n";

Args::Args(int argc, char** argv, const std::vector<std::string>& value_options,
           const std::vector<std::string>& flags) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") {  // the rest are arguments, even those that start with '-'
      positional_.insert(positional_.end(), argv + i + 1, argv + argc);
      break;
    }
    if (arg == "--help" || arg == "-h") {
      help_ = true;
    } else if (arg.size() > 2 && arg.compare(0, 2, "--") == 0) {
      const size_t eq = arg.find('=');
      const std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
      if (contains(flags, name)) {
        if (eq != std::string::npos) throw UsageError("--" + name + " takes no value");
        flags_.push_back(name);
      } else if (contains(value_options, name)) {
        if (name != "set" && value(name)) throw UsageError("--" + name + " is given twice");
        if (eq != std::string::npos) {
          options_.emplace_back(name, arg.substr(eq + 1));
        } else if (i + 1 < argc) {
          options_.emplace_back(name, argv[++i]);
        } else {
          throw UsageError("--" + name + " needs a value");
        }
      } else {
        throw UsageError("unknown option '" + arg + "'");
      }
    } else if (arg.size() > 1 && arg[0] == '-' && !std::isdigit(static_cast<unsigned char>(arg[1]))) {
      throw UsageError("unknown option '" + arg + "'");
    } else {
      positional_.push_back(arg);
    }
  }
}

const std::string& Args::single_positional(const char* what) const {
  if (positional_.empty()) throw UsageError(std::string("missing ") + what);
  if (positional_.size() > 1) throw UsageError("unexpected argument '" + positional_[1] + "'");
  return positional_[0];
}

std::optional<std::string> Args::value(const std::string& name) const {
  std::optional<std::string> last;
  for (const auto& [n, v] : options_) {
    if (n == name) last = v;
  }
  return last;
}

std::vector<std::string> Args::values(const std::string& name) const {
  std::vector<std::string> all;
  for (const auto& [n, v] : options_) {
    if (n == name) all.push_back(v);
  }
  return all;
}

bool Args::flag(const std::string& name) const { return contains(flags_, name); }

int64_t Args::integer(const std::string& name, int64_t fallback, int64_t min, int64_t max) const {
  const std::optional<std::string> text = value(name);
  if (!text) return fallback;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text->c_str(), &end, 10);
  if (text->empty() || *end != '\0' || errno == ERANGE || v < min || v > max) {
    throw UsageError("--" + name + ": expected an integer in [" + std::to_string(min) + ", " +
                     std::to_string(max) + "], got '" + *text + "'");
  }
  return v;
}

double Args::real(const std::string& name, double fallback) const {
  const std::optional<std::string> text = value(name);
  if (!text) return fallback;
  char* end = nullptr;
  const double v = std::strtod(text->c_str(), &end);
  if (text->empty() || *end != '\0' || !std::isfinite(v)) {
    throw UsageError("--" + name + ": expected a number, got '" + *text + "'");
  }
  return v;
}

Program load_program(const std::string& file, const std::vector<std::string>& overrides) {
  const std::string prefix = "builtin:";
  ir::Neuron neuron = file.compare(0, prefix.size(), prefix) == 0
                          ? builtin_neuron(file.substr(prefix.size()))
                          : frontend::parse(frontend::read_neuron_file(file), file);
  if (!overrides.empty()) {
    std::vector<ir::ConstantOverride> parsed;
    for (const std::string& o : overrides) {
      parsed.push_back(parse_override(o));
      // true and false are for Bool constants only (with_constants checks numbers against Bools).
      const std::string value = o.substr(o.find('=') + 1);
      for (const ir::ConstDecl& c : neuron.constants) {
        if (c.name == parsed.back().name && c.type == ir::Type::Float && (value == "true" || value == "false")) {
          throw UsageError("--set " + c.name + ": expected a number (" + c.name + " is a Float constant), got '" +
                           value + "'");
        }
      }
    }
    neuron = ir::with_constants(neuron, parsed);
  }
  return Program(std::move(neuron));
}

DType parse_dtype(const std::string& text) {
  for (DType d : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    if (text == dtype_name(d)) return d;
  }
  throw UsageError("--dtype: expected float32, float16, bfloat16 or float64, got '" + text + "'");
}

}  // namespace spikejit::cli
