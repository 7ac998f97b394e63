#include "base/affinity.h"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace baton {
namespace {

std::string ReadLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

bool ParseCpuList(const std::string& text, std::vector<int>* cpus) {
  cpus->clear();
  std::stringstream ranges(text);
  std::string range;
  while (std::getline(ranges, range, ',')) {
    if (range.empty()) continue;
    int first = -1, last = -1;
    char dash = 0;
    std::stringstream one(range);
    if (!(one >> first) || first < 0) return false;
    last = first;
    if (one >> dash) {
      if (dash != '-' || !(one >> last) || last < first) return false;
    }
    for (int c = first; c <= last; ++c) cpus->push_back(c);
  }
  return !cpus->empty();
}

std::string WidenSingleCpuAffinity() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0 || CPU_COUNT(&mask) != 1) return "";
  int cpu = -1;
  for (int c = 0; c < CPU_SETSIZE && cpu < 0; ++c)
    if (CPU_ISSET(c, &mask)) cpu = c;
  // The NUMA node whose CPU list holds it; where sysfs has no nodes, every
  // online CPU.
  std::string list, where = "every online CPU";
  std::vector<int> nodes;
  if (ParseCpuList(ReadLine("/sys/devices/system/node/online"), &nodes)) {
    for (int node : nodes) {
      const std::string cpulist =
          ReadLine("/sys/devices/system/node/node" + std::to_string(node) + "/cpulist");
      std::vector<int> cpus;
      if (ParseCpuList(cpulist, &cpus) && std::find(cpus.begin(), cpus.end(), cpu) != cpus.end()) {
        list = cpulist;
        where = "NUMA node " + std::to_string(node);
        break;
      }
    }
  }
  if (list.empty()) list = ReadLine("/sys/devices/system/cpu/online");
  std::vector<int> cpus;
  if (!ParseCpuList(list, &cpus) || cpus.size() < 2) return "";
  cpu_set_t wide;
  CPU_ZERO(&wide);
  for (int c : cpus)
    if (c < CPU_SETSIZE) CPU_SET(c, &wide);
  // The kernel keeps only what the cpuset allows, and refuses a mask with none of it.
  if (sched_setaffinity(0, sizeof(wide), &wide) != 0) return "";
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0 || CPU_COUNT(&mask) < 2) return "";
  return "bound to CPU " + std::to_string(cpu) + " alone; now on the " +
         std::to_string(CPU_COUNT(&mask)) + " CPUs of " + where + " it may use";
}

}  // namespace baton
