#include "tools/batonrun/hosts.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <fstream>
#include <sstream>

namespace batonrun {
namespace {

// Slots are bounded like -n, so that their sum cannot overflow an int.
constexpr int kMaxSlots = 1 << 20;

bool ParseSlots(std::string_view text, int* slots) {
  int value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || text.empty() || value < 1 || value > kMaxSlots)
    return false;
  *slots = value;
  return true;
}

// Host names and addresses as a shell and ssh accept them unquoted: letters, digits and ".-_@"
// (user@host), plus ':' only inside a bracketed IPv6 address. Anything else is most likely a
// typo, and would need quoting on the agent's command line.
bool ValidHostName(std::string_view name) {
  if (name.empty() || name.front() == '-') return false;
  if (name.front() == '[') {
    return name.size() > 2 && name.back() == ']' &&
           std::all_of(name.begin() + 1, name.end() - 1, [](char c) {
             return isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.';
           });
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' || c == '@';
  });
}

void AddHost(std::vector<HostSlots>* hosts, std::string_view name, int slots) {
  auto it = std::find_if(hosts->begin(), hosts->end(),
                         [&](const HostSlots& h) { return h.name == name; });
  if (it == hosts->end()) {
    hosts->push_back({std::string(name), slots});
  } else {
    it->slots = std::min(it->slots + slots, kMaxSlots);
  }
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

bool ParseHostList(std::string_view list, std::vector<HostSlots>* hosts, std::string* error) {
  if (list.empty()) {
    *error = "empty host list";
    return false;
  }
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string_view::npos) comma = list.size();
    std::string_view entry = list.substr(start, comma - start);
    std::string_view name = entry;
    int slots = 1;
    // The last ':' after any bracketed IPv6 address separates the slots.
    size_t colon = entry.rfind(':');
    size_t bracket = entry.rfind(']');
    if (colon != std::string_view::npos && (bracket == std::string_view::npos || colon > bracket)) {
      name = entry.substr(0, colon);
      if (!ParseSlots(entry.substr(colon + 1), &slots)) {
        *error = "invalid slots in host '" + std::string(entry) + "': expected HOST:N, N >= 1";
        return false;
      }
    }
    if (!ValidHostName(name)) {
      *error = "invalid host '" + std::string(entry) + "' in host list '" + std::string(list) + "'";
      return false;
    }
    AddHost(hosts, name, slots);
    start = comma + 1;
  }
  return true;
}

bool ParseHostfile(std::string_view text, std::vector<HostSlots>* hosts, std::string* error) {
  int line_number = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t newline = text.find('\n', start);
    if (newline == std::string_view::npos) newline = text.size();
    std::string_view line = text.substr(start, newline - start);
    start = newline + 1;
    ++line_number;
    line = Trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    std::istringstream words{std::string(line)};
    std::string name, word;
    words >> name;
    if (!ValidHostName(name)) {
      *error = "line " + std::to_string(line_number) + ": invalid host '" + name + "'";
      return false;
    }
    int slots = 1;
    while (words >> word) {
      std::string_view w = word;
      size_t eq = w.find('=');
      std::string_view key = w.substr(0, eq);
      if (eq == std::string_view::npos ||
          (key != "slots" && key != "max_slots" && key != "max-slots")) {
        *error =
            "line " + std::to_string(line_number) + ": unknown '" + word + "' (expected slots=N)";
        return false;
      }
      int value = 0;
      if (!ParseSlots(w.substr(eq + 1), &value)) {
        *error = "line " + std::to_string(line_number) + ": invalid '" + word + "' (N >= 1)";
        return false;
      }
      if (key == "slots") slots = value;
    }
    AddHost(hosts, name, slots);
  }
  if (hosts->empty()) {
    *error = "no host in it";
    return false;
  }
  return true;
}

bool ReadHostfile(const std::string& path, std::vector<HostSlots>* hosts, std::string* error) {
  std::ifstream file(path);
  if (!file) {
    *error = "cannot read hostfile '" + path + "'";
    return false;
  }
  std::ostringstream text;
  text << file.rdbuf();
  std::string problem;
  if (!ParseHostfile(text.str(), hosts, &problem)) {
    *error = "hostfile '" + path + "': " + problem;
    return false;
  }
  return true;
}

bool PlaceRanks(const std::vector<HostSlots>& hosts, int num_ranks,
                std::vector<HostRanks>* placement, std::string* error) {
  long long total = 0;
  for (const HostSlots& host : hosts) total += host.slots;
  if (num_ranks == 0) num_ranks = static_cast<int>(std::min<long long>(total, INT_MAX));
  if (num_ranks > total) {
    *error = "-n " + std::to_string(num_ranks) + " ranks do not fit the " + std::to_string(total) +
             " slots of the hosts";
    return false;
  }
  int next = 0;
  for (const HostSlots& host : hosts) {
    if (next == num_ranks) break;
    int count = std::min(host.slots, num_ranks - next);
    placement->push_back({host.name, next, count});
    next += count;
  }
  return true;
}

bool IsLocalHost(std::string_view name) {
  if (name == "localhost" || name == "127.0.0.1" || name == "[::1]") return true;
  char own[256] = {};
  if (gethostname(own, sizeof(own) - 1) != 0) return false;
  std::string_view own_name = own;
  if (name == own_name) return true;
  // "node1" names this host when its name is "node1.cluster.example", and the other way round.
  auto short_name = [](std::string_view s) { return s.substr(0, s.find('.')); };
  return !name.empty() && isalpha(static_cast<unsigned char>(name[0])) &&
         short_name(name) == short_name(own_name);
}

}  // namespace batonrun
