// The neuron IR: one step of a neuron as an SSA graph over scalars, elementwise over neurons.
//
// Two levels share the `Node` type:
//   * `Neuron`   - what a user wrote: declarations plus an ordered body of named assignments.
//                  Named constants are still references (`Op::Constant`). Printable, hashable.
//   * `Step`     - what executors and code generators consume: a flat graph whose leaves are
//                  slots (inputs, states, parameters, saved values, gradients) and literals, with
//                  named constants substituted, folded, common subexpressions merged, dead code
//                  removed. The forward step comes from `lower`, the backward step from
//                  `autodiff::differentiate`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace spikejit::ir {

enum class Type : uint8_t { Float, Bool };

// X(enum name, text name, arity)
// Leaves first (and Uniform last); `index` selects the slot for slot leaves and the stream of
// Uniform, `value` holds the literal.
#define SPIKEJIT_IR_OPS(X)                                                                   \
  /* leaves */                                                                               \
  X(Literal, "literal", 0)   /* value */                                                      \
  X(Constant, "constant", 0) /* Neuron only: named constant `index` */                        \
  X(Input, "input", 0)       /* forward: inputs[index][t] */                                  \
  X(State, "state", 0)       /* forward: states[index][t-1] */                                \
  X(Param, "param", 0)       /* parameters[index] (scalar or per neuron) */                   \
  X(Saved, "saved", 0)       /* backward: saved[index][t], written by the training forward */ \
  X(GradOutput, "grad_output", 0) /* backward: dL/d outputs[index][t] */                     \
  X(GradState, "grad_state", 0)   /* backward: dL/d states[index][t] (all paths) */          \
  /* arithmetic */                                                                           \
  X(Add, "add", 2) X(Sub, "sub", 2) X(Mul, "mul", 2) X(Div, "div", 2) X(Neg, "neg", 1)          \
  X(Reciprocal, "reciprocal", 1) X(Fmod, "fmod", 2) X(Pow, "pow", 2)                            \
  X(Min, "min", 2) X(Max, "max", 2) X(Clamp, "clamp", 3)                                      \
  /* transcendentals and friends */                                                          \
  X(Exp, "exp", 1) X(Log, "log", 1) X(Log2, "log2", 1) X(Sqrt, "sqrt", 1) X(Rsqrt, "rsqrt", 1)  \
  X(Sigmoid, "sigmoid", 1) X(Tanh, "tanh", 1) X(Sin, "sin", 1) X(Cos, "cos", 1)               \
  X(Erf, "erf", 1) X(Abs, "abs", 1) X(Relu, "relu", 1) X(Sign, "sign", 1)                     \
  X(Round, "round", 1) /* half to even, like torch.round */                                  \
  X(Floor, "floor", 1) X(Ceil, "ceil", 1)                                                     \
  X(Log1p, "log1p", 1) X(Expm1, "expm1", 1) X(Exp2, "exp2", 1) X(Log10, "log10", 1)           \
  X(Tan, "tan", 1) X(Atan, "atan", 1) X(Asin, "asin", 1) X(Acos, "acos", 1)                   \
  X(Sinh, "sinh", 1) X(Cosh, "cosh", 1) X(Asinh, "asinh", 1) X(Acosh, "acosh", 1)             \
  X(Atanh, "atanh", 1) X(Erfc, "erfc", 1) X(Atan2, "atan2", 2) X(Hypot, "hypot", 2)           \
  X(Erfinv, "erfinv", 1) /* (-1, 1) -> R: +-inf at +-1, NaN beyond */                        \
  X(Ndtri, "ndtri", 1)   /* inverse normal CDF (0, 1) -> R: -inf at 0, inf at 1, NaN beyond */ \
  /* comparisons: Float x Float -> Bool */                                                   \
  X(Eq, "eq", 2) X(Ne, "ne", 2) X(Lt, "lt", 2) X(Le, "le", 2) X(Gt, "gt", 2) X(Ge, "ge", 2)      \
  /* logic: Bool -> Bool */                                                                  \
  X(And, "and", 2) X(Or, "or", 2) X(Not, "not", 1)                                            \
  /* selection and casts */                                                                  \
  X(Where, "where", 3)  /* where(Bool c, a, b): a and b of the same type */                  \
  X(ToFloat, "float", 1) /* Bool -> Float (1 or 0) */                                         \
  X(ToBool, "bool", 1)   /* Float -> Bool (x != 0) */                                         \
  /* spiking */                                                                              \
  X(Spike, "spike", 1)   /* forward x >= 0 ? 1 : 0; backward grad * surrogate'(x) */          \
  X(Detach, "detach", 1) /* identity forward, zero gradient */                               \
  /* random numbers (a leaf; last, so that adding it kept the other ops' numbers) */          \
  X(Uniform, "uniform", 0) /* forward: a draw in [0, 1) of stream `index` (ir/random.h) */

enum class Op : uint8_t {
#define SPIKEJIT_IR_ENUM(name, text, arity) name,
  SPIKEJIT_IR_OPS(SPIKEJIT_IR_ENUM)
#undef SPIKEJIT_IR_ENUM
};

struct OpInfo {
  const char* name;  // the text-format name ("add", "spike", ...)
  int arity;
};
const OpInfo& op_info(Op op);
bool is_leaf(Op op);
// Finds an op by its text name among the non-leaf ops; false if unknown.
bool op_from_name(const std::string& name, Op* out);

// A surrogate gradient function with SpikingJelly's name and parameters.
enum class SurrogateKind : uint8_t {
  PiecewiseQuadratic, PiecewiseExp, Sigmoid, SoftSign, SuperSpike, ATan, NonzeroSignLogAbs, Erf,
  PiecewiseLeakyReLU, SquarewaveFourierSeries, S2NN, QPseudoSpike, LeakyKReLU,
  FakeNumericalGradient, LogTailedReLU, DeterministicPass, Rect,
};

struct Surrogate {
  SurrogateKind kind = SurrogateKind::Sigmoid;
  std::vector<double> params;  // in the order of surrogate_info(kind).param_names, all present
  bool operator==(const Surrogate& o) const { return kind == o.kind && params == o.params; }
};

struct SurrogateInfo {
  const char* name;        // snake_case text name, e.g. "piecewise_quadratic"
  const char* class_name;  // SpikingJelly's class name, e.g. "PiecewiseQuadratic"
  std::vector<const char*> param_names;
  std::vector<double> defaults;
};
const SurrogateInfo& surrogate_info(SurrogateKind kind);
const std::vector<SurrogateKind>& all_surrogates();
// Accepts the snake_case name or SpikingJelly's class name.
bool surrogate_from_name(const std::string& name, SurrogateKind* out);

struct Node {
  Op op = Op::Literal;
  Type type = Type::Float;
  int32_t args[3] = {-1, -1, -1};  // ids of earlier nodes
  int32_t index = -1;              // slot / declaration index for leaves
  double value = 0.0;              // Literal
  Surrogate surrogate;             // Spike
};

// A value's position in a node list.
using ValueId = int32_t;

// ---------------------------------------------------------------------------------------------
// Neuron: the user's definition.

struct InputDecl { std::string name; };
struct OutputDecl { std::string name; };
struct ConstDecl { std::string name; Type type = Type::Float; double value = 0.0; };  // Bool: 0/1
// Initial value of a state when the caller passes none: a number, or a named constant.
struct StateDecl { std::string name; double init = 0.0; int32_t init_constant = -1; };
enum class ParamKind : uint8_t { Scalar, PerNeuron };
struct ParamDecl { std::string name; ParamKind kind = ParamKind::Scalar; double init = 0.0; };

struct Assignment {
  std::string name;  // an output, a state (its next value) or a local
  ValueId value;
};

struct Neuron {
  std::string name;
  std::vector<InputDecl> inputs;
  std::vector<StateDecl> states;
  std::vector<ConstDecl> constants;
  std::vector<ParamDecl> params;
  std::vector<OutputDecl> outputs;
  std::vector<Node> nodes;              // SSA; leaves refer to the declarations above
  std::vector<Assignment> body;         // in source order
};

// The initial value of state `i` when no tensor is given (resolves a named constant).
double state_default(const Neuron& n, int i);

// Checks a Neuron and throws spikejit::Error listing every problem: undefined names, duplicate
// declarations, a state never assigned, an output never assigned, type errors (Bool vs Float),
// bad node references, surrogate parameter counts.
void verify(const Neuron& n);

// Returns a copy with constants overridden by name (Bool constants take 0/1). Unknown names throw.
struct ConstantOverride { std::string name; double value; };
Neuron with_constants(const Neuron& n, const std::vector<ConstantOverride>& overrides);

// ---------------------------------------------------------------------------------------------
// Step: a lowered graph, the input of executors and code generators.

struct Step {
  std::vector<Node> nodes;       // topological order; no Constant leaves
  int num_inputs = 0, num_states = 0, num_outputs = 0;
  std::vector<ParamKind> params;
  // Forward step: `outputs` and `next_states` are the results.
  // Backward step: `grad_inputs`, `grad_prev_states` and `grad_params` (per-step contribution,
  // summed by the executor over t, and over neurons for scalar parameters) are the results.
  std::vector<ValueId> outputs, next_states;
  std::vector<ValueId> grad_inputs, grad_prev_states, grad_params;
  // Backward step only: `saved[i]` is the forward node (of the lowered forward step) whose value
  // the training forward stores per step and the backward reads as `Saved(i)`.
  std::vector<ValueId> saved;
  // Backward step only: empty, or one flag per `saved` entry; true where the value is stored as
  // one bit per neuron and step (a spike-valued value under the pack_spikes save policy).
  std::vector<bool> saved_packed;

  bool is_saved_packed(size_t i) const { return i < saved_packed.size() && saved_packed[i]; }
};

// Per node of `nodes` (in topological order): true when the value can only be +0 or 1, so that
// one bit holds it exactly (bit-packed outputs and saved values). The rule, applied in order:
//   spike(x); any Bool value (comparisons, logic, bool(x), where of Bool branches); float(b);
//   the literals +0 and 1; detach(a), a * b, min(a, b), max(a, b) and 1 - a of such values; and
//   where(c, a, b) whose branches a and b are such values.
// Everything else (inputs, states, parameters, other arithmetic) is not, whatever it computes.
std::vector<bool> spike_valued(const std::vector<Node>& nodes);

// Per node of `nodes` (in topological order): true when its value is the same at every step of a
// call: literals, parameters, and the values computed from such values alone (PLIF's
// sigmoid(w)). Executors compute the latter once per call instead of once per step.
std::vector<bool> step_invariant(const std::vector<Node>& nodes);

// PyTorch's requires_grad rule over a forward step: a value carries a gradient when it is a Float
// computed from one that does, not through detach; Bool values (comparisons, logic) carry none,
// so neither does float(b) of one; literals and draws carry none. Rounding carries one (zero, as
// in PyTorch). Over a call, a state carries one into the next step when its value from the step
// before does, as in a loop of the step in PyTorch.
struct GradientFlow {
  // With every input, state and parameter carrying a gradient into one step:
  std::vector<bool> outputs, states;  // per output and next state: it carries a gradient
  // Per input, state (its initial value) and parameter, in that order: its gradient reaches an
  // output or a next state (else it is None in PyTorch, no graph leads to it).
  std::vector<bool> arguments;
  // Per output, then per next state: the arguments (in the order above) whose gradient reaches it
  // within the step.
  std::vector<std::vector<bool>> sources;
  size_t num_inputs = 0;  // (the states' flags in `arguments` follow the inputs')

  // Per output, then per final state, then per state sequence: whether a call of `steps` steps
  // returns it with requires_grad when the inputs, initial states and parameters marked in
  // `requiring` (one flag per argument) require grad, as a loop of the step in PyTorch does.
  std::vector<bool> requires_grad(const std::vector<bool>& requiring, int64_t steps) const;
  // The least number of steps from which requires_grad(requiring, steps) stays the same for
  // every longer call; -1 where it keeps changing (states whose flags cycle, as two states that
  // swap values do). For a call whose number of steps is not known yet.
  int64_t settles_after(const std::vector<bool>& requiring) const;
};
GradientFlow gradient_flow(const Step& forward);

// Neuron -> forward Step: substitutes constants, folds, merges duplicates, removes dead code.
Step lower(const Neuron& n);

// Folds constants, merges identical nodes and removes nodes no result uses (any Step).
void simplify(Step& s);

// Human-readable listing, one node per line (`%3 = add %1, %2`), then the results.
std::string to_string(const Step& s);

}  // namespace spikejit::ir
