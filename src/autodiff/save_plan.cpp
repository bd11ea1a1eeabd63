// Minimum-cost vertex cut by max-flow on the node-split forward graph (Edmonds-Karp; the graphs
// have tens of nodes). Node v becomes in(v) -> out(v) with the cost of saving v; an argument edge
// u -> v becomes out(u) -> in(v) with unbounded capacity.
//
// Costs count sequence traffic in units of 1/16 of a value: a computed value is written by the
// training forward and read by the backward (32); an input is already in memory, so the backward
// can read it there (16); under pack_spikes a spike-valued value is written and read as one bit
// (2: its size next to a float16 value, and half that next to a float32 one, the planner prefers
// it either way). A random draw (uniform()) is a source like an input, but in no buffer: the
// backward gets it, or what depends on it, saved (the per-step backward has no seed).
#include "autodiff/save_plan.h"

#include <algorithm>
#include <deque>

namespace spikejit::autodiff {
namespace {

constexpr int kUnbounded = 1 << 29;
constexpr int kValueCost = 32, kInputCost = 16, kPackedCost = 2;

class FlowGraph {
 public:
  explicit FlowGraph(int vertices) : adj_(vertices) {}

  void add_edge(int from, int to, int cap) {
    adj_[from].push_back({to, cap, static_cast<int>(adj_[to].size())});
    adj_[to].push_back({from, 0, static_cast<int>(adj_[from].size()) - 1});
  }

  void max_flow(int source, int sink) {
    while (augment(source, sink)) {
    }
  }

  // Vertices that can still reach `sink` through edges with residual capacity.
  std::vector<char> reaching(int sink) const {
    std::vector<char> seen(adj_.size(), 0);
    std::deque<int> queue{sink};
    seen[sink] = 1;
    while (!queue.empty()) {
      int v = queue.front();
      queue.pop_front();
      for (const Edge& back : adj_[v]) {
        const Edge& forward = adj_[back.to][back.rev];  // back.to -> v
        if (forward.cap > 0 && !seen[back.to]) {
          seen[back.to] = 1;
          queue.push_back(back.to);
        }
      }
    }
    return seen;
  }

 private:
  struct Edge {
    int to, cap, rev;
  };

  // One shortest augmenting path; false when none is left.
  bool augment(int source, int sink) {
    std::vector<std::pair<int, int>> parent(adj_.size(), {-1, -1});  // (vertex, edge index)
    std::deque<int> queue{source};
    parent[source] = {source, -1};
    while (!queue.empty() && parent[sink].first < 0) {
      int v = queue.front();
      queue.pop_front();
      for (int i = 0; i < static_cast<int>(adj_[v].size()); ++i) {
        const Edge& e = adj_[v][i];
        if (e.cap > 0 && parent[e.to].first < 0) {
          parent[e.to] = {v, i};
          queue.push_back(e.to);
        }
      }
    }
    if (parent[sink].first < 0) return false;
    int bottleneck = kUnbounded;
    for (int v = sink; v != source; v = parent[v].first)
      bottleneck = std::min(bottleneck, adj_[parent[v].first][parent[v].second].cap);
    for (int v = sink; v != source; v = parent[v].first) {
      Edge& e = adj_[parent[v].first][parent[v].second];
      e.cap -= bottleneck;
      adj_[e.to][e.rev].cap += bottleneck;
    }
    return true;
  }

  std::vector<std::vector<Edge>> adj_;
};

}  // namespace

std::vector<ir::ValueId> choose_saved(const std::vector<ir::Node>& forward,
                                      const std::vector<ir::ValueId>& needed, bool pack_spikes) {
  const int n = static_cast<int>(forward.size());
  // Values that change from step to step; the rest (literals, parameters) are free to recompute.
  std::vector<char> varying(n, 0);
  for (int v = 0; v < n; ++v) {
    const ir::Node& node = forward[v];
    varying[v] = node.op == ir::Op::Input || node.op == ir::Op::State || node.op == ir::Op::Uniform;
    for (int a = 0; a < ir::op_info(node.op).arity; ++a) varying[v] |= varying[node.args[a]];
  }
  bool any_sink = false;
  for (ir::ValueId v : needed) any_sink |= varying[v] != 0;
  if (!any_sink) return {};

  const std::vector<bool> packable = pack_spikes ? ir::spike_valued(forward) : std::vector<bool>(n, false);
  const int source = 2 * n, sink = 2 * n + 1;
  FlowGraph g(2 * n + 2);
  for (int v = 0; v < n; ++v) {
    if (!varying[v]) continue;
    const ir::Node& node = forward[v];
    g.add_edge(2 * v, 2 * v + 1, node.op == ir::Op::Input ? kInputCost : packable[v] ? kPackedCost : kValueCost);
    if (node.op == ir::Op::Input || node.op == ir::Op::State || node.op == ir::Op::Uniform)
      g.add_edge(source, 2 * v, kUnbounded);
    for (int a = 0; a < ir::op_info(node.op).arity; ++a)
      if (varying[node.args[a]]) g.add_edge(2 * node.args[a] + 1, 2 * v, kUnbounded);
  }
  for (ir::ValueId v : needed)
    if (varying[v]) g.add_edge(2 * v + 1, sink, kUnbounded);
  g.max_flow(source, sink);

  // The sink side is the smallest possible: the vertices that can still reach the sink.
  const std::vector<char> sink_side = g.reaching(sink);
  std::vector<ir::ValueId> saved;
  for (int v = 0; v < n; ++v)
    if (varying[v] && !sink_side[2 * v] && sink_side[2 * v + 1]) saved.push_back(v);
  return saved;
}

}  // namespace spikejit::autodiff
