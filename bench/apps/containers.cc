// bench/apps: std::map, std::unordered_map, std::string, std::vector and shared_ptr trees
#include <map>
#include <string>
#include <vector>
#include <unordered_map>
#include <memory>
#include <random>
#include <cstdio>
struct Node { std::string name; std::vector<int> v; std::shared_ptr<Node> l, r; };
int main() {
  std::mt19937_64 rng(1);
  std::map<std::string, std::vector<int>> m;
  std::unordered_map<long, std::string> u;
  long sum = 0;
  for (int round = 0; round < 6; round++) {
    for (int i = 0; i < 200000; i++) {
      std::string k = "key" + std::to_string(rng() % 100000);
      auto &v = m[k]; v.push_back(i); if (v.size() > 8) v.erase(v.begin(), v.begin() + 4);
      u[rng() % 50000] = std::string(rng() % 64, 'x');
      if (i % 3 == 0) m.erase("key" + std::to_string(rng() % 100000));
    }
    std::vector<std::shared_ptr<Node>> trees;
    for (int t = 0; t < 20000; t++) {
      auto n = std::make_shared<Node>(); n->name = std::to_string(t); n->v.resize(t % 17);
      n->l = std::make_shared<Node>(); n->r = std::make_shared<Node>(); trees.push_back(n);
    }
    sum += m.size() + u.size() + trees.size();
  }
  printf("%ld\n", sum);
}
