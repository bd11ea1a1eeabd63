// Which values of a step and of a call carry a gradient, by PyTorch's requires_grad rule: see
// spikejit/ir.h.
#include <algorithm>
#include <string>
#include <vector>

#include "spikejit/error.h"
#include "spikejit/ir.h"

namespace spikejit::ir {
namespace {

using Flags = std::vector<bool>;

// into |= from, elementwise.
void merge(Flags& into, const Flags& from) {
  for (size_t a = 0; a < into.size(); ++a) into[a] = into[a] || from[a];
}

// Per node of the step: the arguments (inputs, states, parameters) whose gradient reaches it.
std::vector<Flags> sources_per_node(const Step& forward) {
  const size_t ni = static_cast<size_t>(forward.num_inputs);
  const size_t ns = static_cast<size_t>(forward.num_states);
  std::vector<Flags> from(forward.nodes.size(), Flags(ni + ns + forward.params.size(), false));
  for (size_t i = 0; i < forward.nodes.size(); ++i) {
    const Node& n = forward.nodes[i];
    if (n.type != Type::Float || n.op == Op::Detach) continue;  // Bool values carry none
    if (n.op == Op::Input) from[i][static_cast<size_t>(n.index)] = true;
    if (n.op == Op::State) from[i][ni + static_cast<size_t>(n.index)] = true;
    if (n.op == Op::Param) from[i][ni + ns + static_cast<size_t>(n.index)] = true;
    for (int k = 0; k < op_info(n.op).arity; ++k) {
      if (n.args[k] >= 0) merge(from[i], from[static_cast<size_t>(n.args[k])]);
    }
  }
  return from;
}

// A call's requires_grad flags step by step, until the states' flags repeat: they are a function
// of the flags before the step, so they repeat within 2^states steps and from then on cycle.
struct Walk {
  // Per number of steps k taken (0 to the last simulated): the states' flags after k steps, and
  // the outputs' and next states' flags over the first k steps (any step's).
  std::vector<Flags> states, outputs, seqs;
  int64_t cycle_start = -1;  // states.back() repeats states[cycle_start]; -1: none within the steps

  size_t last() const { return states.size() - 1; }
  // The states' flags after `steps` steps.
  const Flags& states_after(int64_t steps) const {
    const int64_t k = static_cast<int64_t>(last());
    if (steps <= k) return states[static_cast<size_t>(steps)];
    const int64_t period = k - cycle_start;
    return states[static_cast<size_t>(cycle_start + (steps - cycle_start) % period)];
  }
  // Per output, final state and state sequence, after `steps` steps. Empty sequences (no step)
  // require grad as those of one step do: as PyTorch's ops on empty tensors, by what they are
  // computed from.
  Flags flags(int64_t steps) const {
    const size_t k = static_cast<size_t>(std::min<int64_t>(std::max<int64_t>(steps, 1), static_cast<int64_t>(last())));
    Flags all = outputs[k];
    const Flags& finals = states_after(steps);
    all.insert(all.end(), finals.begin(), finals.end());
    all.insert(all.end(), seqs[k].begin(), seqs[k].end());
    return all;
  }
};

Walk walk(const GradientFlow& flow, const Flags& requiring, int64_t max_steps) {
  if (requiring.size() != flow.arguments.size()) {
    throw ArgumentError("requiring",
                        std::to_string(flow.arguments.size()) + " flags (one per input, state and parameter)",
                        std::to_string(requiring.size()));
  }
  const size_t no = flow.outputs.size(), ns = flow.states.size(), ni = flow.num_inputs;
  Walk w;
  w.states.emplace_back(requiring.begin() + static_cast<std::ptrdiff_t>(ni),
                        requiring.begin() + static_cast<std::ptrdiff_t>(ni + ns));
  w.outputs.emplace_back(no, false);
  w.seqs.emplace_back(ns, false);
  Flags carrying = requiring;
  for (int64_t step = 0; step < max_steps && w.cycle_start < 0; ++step) {
    std::copy(w.states.back().begin(), w.states.back().end(), carrying.begin() + static_cast<std::ptrdiff_t>(ni));
    Flags outputs = w.outputs.back(), seqs = w.seqs.back(), next(ns, false);
    for (size_t r = 0; r < no + ns; ++r) {
      bool carries = false;
      for (size_t a = 0; a < carrying.size(); ++a) carries = carries || (flow.sources[r][a] && carrying[a]);
      if (r < no) {
        outputs[r] = outputs[r] || carries;
      } else {
        next[r - no] = carries;
        seqs[r - no] = seqs[r - no] || carries;
      }
    }
    const auto again = std::find(w.states.begin(), w.states.end(), next);
    if (again != w.states.end()) w.cycle_start = again - w.states.begin();
    w.states.push_back(std::move(next));
    w.outputs.push_back(std::move(outputs));
    w.seqs.push_back(std::move(seqs));
  }
  return w;
}

}  // namespace

GradientFlow gradient_flow(const Step& forward) {
  const std::vector<Flags> from = sources_per_node(forward);
  GradientFlow flow;
  flow.num_inputs = static_cast<size_t>(forward.num_inputs);
  flow.arguments.assign(static_cast<size_t>(forward.num_inputs + forward.num_states) + forward.params.size(), false);
  auto record = [&](ValueId v, Flags& carries) {
    const Flags& reaching = from[static_cast<size_t>(v)];
    carries.push_back(std::any_of(reaching.begin(), reaching.end(), [](bool r) { return r; }));
    merge(flow.arguments, reaching);
    flow.sources.push_back(reaching);
  };
  for (ValueId v : forward.outputs) record(v, flow.outputs);
  for (ValueId v : forward.next_states) record(v, flow.states);
  return flow;
}

std::vector<bool> GradientFlow::requires_grad(const std::vector<bool>& requiring, int64_t steps) const {
  if (steps < 0) throw ArgumentError("steps", "a number of steps >= 0", std::to_string(steps));
  return walk(*this, requiring, std::max<int64_t>(steps, 1)).flags(steps);
}

int64_t GradientFlow::settles_after(const std::vector<bool>& requiring) const {
  // The walk ends where the states' flags repeat; a longer call's flags are then those of the
  // last step if the repeat is of the step before (a period of 1), else they cycle.
  const Walk w = walk(*this, requiring, int64_t{1} << 16);
  const int64_t k = static_cast<int64_t>(w.last());
  if (w.cycle_start < 0 || k - w.cycle_start != 1) return -1;
  const Flags settled = w.flags(k);
  int64_t from = k;
  while (from > 0 && w.flags(from - 1) == settled) --from;
  return from;
}

}  // namespace spikejit::ir
