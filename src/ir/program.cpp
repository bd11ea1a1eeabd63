// Program: a verified neuron with its lowered forward step and its lazily derived backward step.
#include "spikejit/program.h"

#include <mutex>
#include <vector>

#include "common/sha256.h"
#include "spikejit/autodiff.h"
#include "spikejit/error.h"
#include "spikejit/frontend.h"

namespace spikejit {

// The backward step of one save policy, derived on first use.
struct DerivedBackward {
  std::once_flag once;
  ir::Step step;
  std::vector<int> saved_inputs;
};

// A value of Program::derived.
struct DerivedValue {
  const void* owner;
  int variant;
  std::shared_ptr<const void> value;
};

struct Program::Impl {
  ir::Neuron neuron;
  ir::Step forward;
  std::string canonical;  // computed once: the hash is on every kernel-cache lookup
  std::string hash;
  std::vector<bool> packable_outputs;
  ir::GradientFlow gradient_flow;
  bool uses_random = false;
  DerivedBackward backward[2];  // [pack_spikes]
  std::recursive_mutex derived_mutex;  // recursive: a value's `make` may derive others
  std::vector<DerivedValue> derived;  // a handful: a linear search
};

Program::Program(ir::Neuron neuron) : impl_(std::make_shared<Impl>()) {
  ir::verify(neuron);
  impl_->forward = ir::lower(neuron);
  impl_->canonical = frontend::print(neuron);
  impl_->hash = sha256_hex(impl_->canonical);
  impl_->neuron = std::move(neuron);
  const std::vector<bool> binary = ir::spike_valued(impl_->forward.nodes);
  for (const ir::Node& node : impl_->forward.nodes) impl_->uses_random |= node.op == ir::Op::Uniform;
  for (ir::ValueId v : impl_->forward.outputs) impl_->packable_outputs.push_back(binary[static_cast<size_t>(v)]);
  impl_->gradient_flow = ir::gradient_flow(impl_->forward);
}

Program Program::from_text(std::string_view text, std::string_view file) {
  return Program(frontend::parse(text, file));
}

Program Program::from_file(const std::string& path) { return from_text(frontend::read_neuron_file(path), path); }

const ir::Neuron& Program::neuron() const { return impl_->neuron; }
const ir::Step& Program::forward() const { return impl_->forward; }

// A failed differentiation leaves the flag unset, so the next call tries again and throws again.
const ir::Step& Program::backward(bool pack_spikes) const {
  DerivedBackward& d = impl_->backward[pack_spikes ? 1 : 0];
  std::call_once(d.once, [this, &d, pack_spikes] {
    ir::Step backward = autodiff::differentiate(impl_->forward, pack_spikes);
    std::vector<int> saved_inputs;
    for (ir::ValueId v : backward.saved) {
      const ir::Node& node = impl_->forward.nodes[static_cast<size_t>(v)];
      saved_inputs.push_back(node.op == ir::Op::Input ? node.index : -1);
    }
    d.step = std::move(backward);
    d.saved_inputs = std::move(saved_inputs);
  });
  return d.step;
}

const std::vector<int>& Program::saved_inputs(bool pack_spikes) const {
  backward(pack_spikes);
  return impl_->backward[pack_spikes ? 1 : 0].saved_inputs;
}

const ir::GradientFlow& Program::gradient_flow() const { return impl_->gradient_flow; }
const std::vector<bool>& Program::packable_outputs() const { return impl_->packable_outputs; }
bool Program::uses_random() const { return impl_->uses_random; }

// Made under the lock: a second caller waits for the first one's value instead of making its own.
const void* Program::derived_value(const void* owner, int variant,
                                   const std::function<std::shared_ptr<const void>()>& make) const {
  std::lock_guard<std::recursive_mutex> lock(impl_->derived_mutex);
  for (const DerivedValue& d : impl_->derived) {
    if (d.owner == owner && d.variant == variant) return d.value.get();
  }
  impl_->derived.push_back({owner, variant, make()});
  return impl_->derived.back().value.get();
}

const std::string& Program::canonical() const { return impl_->canonical; }
const std::string& Program::hash() const { return impl_->hash; }

}  // namespace spikejit
