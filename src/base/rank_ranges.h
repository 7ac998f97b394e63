// RankRanges: a list of ranks as people read it in an error message.
#pragma once

#include <string>
#include <vector>

namespace baton {

// "rank 3", or "ranks 0, 2-4, 7": `ranks` ascending; after `max_ranges`
// ranges the rest is "...", so a message about 10 000 ranks stays a line.
inline std::string RankRanges(const std::vector<int>& ranks, int max_ranges = 12) {
  std::string out;
  int ranges = 0;
  for (size_t i = 0; i < ranks.size(); ++i) {
    size_t last = i;
    while (last + 1 < ranks.size() && ranks[last + 1] == ranks[last] + 1) ++last;
    if (ranges++ < max_ranges) {
      if (!out.empty()) out.append(", ");
      out.append(std::to_string(ranks[i]));
      if (last > i) out.append("-").append(std::to_string(ranks[last]));
    } else if (ranges == max_ranges + 1) {
      out.append(", ...");
    }
    i = last;
  }
  return std::string(ranks.size() == 1 ? "rank " : "ranks ").append(out);
}

}  // namespace baton
