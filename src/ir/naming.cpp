#include "ir/naming.h"

namespace spikejit::ir {

BodyNames::BodyNames(const Neuron& n) : n_(n) {
  for (const auto& d : n.inputs) current_[d.name] = {kDeclaration, -1};
  for (const auto& d : n.states) current_[d.name] = {kDeclaration, -1};
  for (const auto& d : n.constants) current_[d.name] = {kDeclaration, -1};
  for (const auto& d : n.params) current_[d.name] = {kDeclaration, -1};
}

void BodyNames::bind(const std::string& name, ValueId v) {
  current_[name] = {v, time_++};
  names_[v].push_back(name);
}

const std::string* BodyNames::declaration_name(const Node& leaf) const {
  auto pick = [&](const auto& decls) -> const std::string* {
    if (leaf.index < 0 || leaf.index >= static_cast<int32_t>(decls.size())) return nullptr;
    return &decls[leaf.index].name;
  };
  switch (leaf.op) {
    case Op::Input: return pick(n_.inputs);
    case Op::State: return pick(n_.states);
    case Op::Constant: return pick(n_.constants);
    case Op::Param: return pick(n_.params);
    default: return nullptr;
  }
}

const std::string* BodyNames::name_of(ValueId v) const {
  if (v < 0 || v >= static_cast<ValueId>(n_.nodes.size())) return nullptr;
  if (const std::string* decl = declaration_name(n_.nodes[v])) {
    auto it = current_.find(*decl);
    if (it != current_.end() && it->second.first == kDeclaration) return decl;
  }
  auto names = names_.find(v);
  if (names == names_.end()) return nullptr;
  const std::string* best = nullptr;
  int best_time = 0;
  for (const std::string& name : names->second) {
    const auto& binding = current_.at(name);
    if (binding.first == v && (best == nullptr || binding.second < best_time)) {
      best = &name;
      best_time = binding.second;
    }
  }
  return best;
}

}  // namespace spikejit::ir
