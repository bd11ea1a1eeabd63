// Names for the declarations of a neuron derived from another (tangent, adjoint): none taken twice.
#pragma once

#include <set>
#include <string>

#include "spikejit/ir.h"

namespace spikejit::autodiff {

class FreshNames {
 public:
  // Every name `n` declares or binds is taken.
  explicit FreshNames(const ir::Neuron& n) {
    for (const auto& d : n.inputs) taken_.insert(d.name);
    for (const auto& d : n.states) taken_.insert(d.name);
    for (const auto& d : n.constants) taken_.insert(d.name);
    for (const auto& d : n.params) taken_.insert(d.name);
    for (const auto& d : n.outputs) taken_.insert(d.name);
    for (const auto& a : n.body) taken_.insert(a.name);
  }

  // A name no one has: `base`, with "_" appended until it is free; taken from now on.
  std::string fresh(std::string base) {
    while (taken_.count(base)) base += "_";
    taken_.insert(base);
    return base;
  }

 private:
  std::set<std::string> taken_;
};

}  // namespace spikejit::autodiff
