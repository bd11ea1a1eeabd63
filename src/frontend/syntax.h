// The syntax tree of a neuron file (first pass of the parser) and the diagnostics collector
// both passes report to.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "spikejit/error.h"
#include "spikejit/ir.h"

namespace spikejit::frontend {

struct Loc {
  int line = 0, col = 0;
};

struct SurrogateArg {
  std::string name;
  Loc loc;
  double value = 0.0;
};

struct Expr {
  enum class Kind { Number, Bool, Name, Unary, Binary, Call };
  Kind kind = Kind::Number;
  Loc loc;
  double value = 0.0;         // Number, Bool (0/1)
  std::string name;           // Name, Call
  ir::Op op = ir::Op::Literal;  // Unary, Binary
  std::vector<std::unique_ptr<Expr>> args;
  int depth = 1;
  // spike(x, surrogate(params)): the surrogate, when written.
  bool has_surrogate = false;
  std::string surrogate;
  Loc surrogate_loc;
  std::vector<SurrogateArg> surrogate_args;
};
using ExprPtr = std::unique_ptr<Expr>;

struct Decl {
  enum class Kind { Input, State, Const, Param, Output };
  Kind kind = Kind::Input;
  std::string name;
  Loc loc;
  double value = 0.0;      // state/param init, const value
  bool is_bool = false;    // const
  bool per_neuron = false;  // param
  std::string init_name;   // state initialised from a constant
  Loc init_loc;
};

struct Statement {
  std::string name;
  Loc loc;
  ExprPtr expr;
};

// Everything the file says, before names are resolved.
struct Syntax {
  std::string name;
  Loc neuron_loc;
  std::vector<Decl> decls;            // in source order
  std::vector<Statement> statements;  // in source order; `expr` is null after a syntax error
};

// Collects diagnostics with their source lines.
class Diagnostics {
 public:
  Diagnostics(std::string_view text, std::string_view file);
  void error(Loc loc, std::string message);
  bool empty() const { return list_.empty(); }
  // Throws ParseError with every diagnostic, ordered by location (unlocated ones last).
  [[noreturn]] void throw_all();

 private:
  std::string file_;
  std::vector<std::string> lines_;
  std::vector<Diagnostic> list_;
};

// Reads the statements of `text`; syntax errors go to `diagnostics` and skip the rest of their
// line. Throws (ParseError) only for an input without any statement.
Syntax read_syntax(std::string_view text, Diagnostics& diagnostics);

}  // namespace spikejit::frontend
