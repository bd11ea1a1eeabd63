// Internal checks of the IR shared by ir::verify and the text parser (which adds locations).
#pragma once

#include <string>
#include <vector>

#include "spikejit/ir.h"

namespace spikejit::ir {

// The deepest expression the text format accepts and the printer writes (keeps recursion bounded).
constexpr int kMaxExpressionDepth = 100;

// One problem found in a Neuron, with what it is attached to (so a parser can locate it).
struct Problem {
  enum class Where { None, Node, Assignment, Input, State, Constant, Param, Output };
  Where where = Where::None;
  int index = -1;  // node id, assignment index or declaration index, by `where`
  std::string message;
};

// Every problem of `n`; empty when it is valid.
std::vector<Problem> find_problems(const Neuron& n);

// Empty when the surrogate's parameters are complete and allowed, else what is wrong.
std::string surrogate_problem(const Surrogate& s);

// The text-format spelling of an op in messages: `+` for Add, `exp` for Exp, ...
std::string op_display_name(Op op);

// True for names the text format reserves (declaration keywords, `and`, `true`, ...).
bool is_keyword(const std::string& name);

// True for [A-Za-z_][A-Za-z0-9_]* that is not a keyword.
bool is_identifier(const std::string& name);

}  // namespace spikejit::ir
