// A reader of nccl-tests' output (all_reduce_perf and its siblings), written the way scripts that
// consume nccl-tests read it: lines starting with '#' are comments, the comment naming the
// columns starts with "size count type redop root", and every other non-empty line is a row
// whose first 13 whitespace-separated fields are, in order, size, count, type, redop, root,
// then time, algbw, busbw and #wrong out of place and the same in place. Fields after the 13th
// are kept as extras. The tests read `tpar bench` output with it.
#ifndef TPAR_TESTS_COMMON_NCCL_TESTS_OUTPUT_H_
#define TPAR_TESTS_COMMON_NCCL_TESTS_OUTPUT_H_

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace tpar_test {

struct NcclTestsHalf {
  double time_us = 0, algbw = 0, busbw = 0;
  long long wrong = -1;  // -1: "N/A"
};

struct NcclTestsRow {
  long long size = 0, count = 0;
  std::string type, redop;
  long long root = 0;
  NcclTestsHalf out_of_place, in_place;
  std::vector<std::string> extras;
};

struct NcclTestsOutput {
  std::vector<std::string> columns;  // the names of the column comment, '#' dropped
  std::vector<NcclTestsRow> rows;
  std::vector<double> avg_busbw;     // each "# Avg bus bandwidth : X" line's X
  long long out_of_bounds = -1;      // "# Out of bounds values : N"
  std::string error;                 // the first line that does not parse, and why
};

namespace nccl_tests_detail {

inline std::vector<std::string> fields(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  std::string f;
  while (in >> f) out.push_back(f);
  return out;
}

inline bool number(const std::string& s, double* v) {
  char* end = nullptr;
  *v = std::strtod(s.c_str(), &end);
  return !s.empty() && end != nullptr && *end == '\0';
}

inline bool integer(const std::string& s, long long* v) {
  char* end = nullptr;
  *v = std::strtoll(s.c_str(), &end, 10);
  return !s.empty() && end != nullptr && *end == '\0';
}

inline bool half(const std::vector<std::string>& f, size_t at, NcclTestsHalf* h) {
  if (!number(f[at], &h->time_us) || !number(f[at + 1], &h->algbw) ||
      !number(f[at + 2], &h->busbw))
    return false;
  if (f[at + 3] == "N/A") {
    h->wrong = -1;
    return true;
  }
  double w = 0;
  if (!number(f[at + 3], &w)) return false;
  h->wrong = static_cast<long long>(w);
  return true;
}

// The number after the ':' of a "# name : value ..." comment.
inline bool valueAfterColon(const std::string& line, double* v) {
  const size_t colon = line.find(':');
  if (colon == std::string::npos) return false;
  const auto f = fields(line.substr(colon + 1));
  return !f.empty() && number(f[0], v);
}

}  // namespace nccl_tests_detail

inline NcclTestsOutput parseNcclTestsOutput(const std::string& text) {
  using namespace nccl_tests_detail;
  NcclTestsOutput out;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (line[0] == '#') {
      const auto f = fields(line.substr(1));
      if (out.columns.empty() && f.size() >= 5 && f[0] == "size" && f[1] == "count" &&
          f[2] == "type" && f[3] == "redop" && f[4] == "root")
        out.columns = f;
      double v = 0;
      if (line.find("Avg bus bandwidth") != std::string::npos && valueAfterColon(line, &v))
        out.avg_busbw.push_back(v);
      if (line.find("Out of bounds values") != std::string::npos && valueAfterColon(line, &v))
        out.out_of_bounds = static_cast<long long>(v);
      continue;
    }
    const auto f = fields(line);
    NcclTestsRow r;
    if (f.size() < 13 || !integer(f[0], &r.size) || !integer(f[1], &r.count) ||
        !integer(f[4], &r.root) || !half(f, 5, &r.out_of_place) || !half(f, 9, &r.in_place)) {
      if (out.error.empty()) out.error = "line " + std::to_string(n) + " is no row: " + line;
      continue;
    }
    r.type = f[2];
    r.redop = f[3];
    r.extras.assign(f.begin() + 13, f.end());
    out.rows.push_back(r);
  }
  if (out.error.empty() && out.columns.empty()) out.error = "no column comment";
  return out;
}

}  // namespace tpar_test

#endif  // TPAR_TESTS_COMMON_NCCL_TESTS_OUTPUT_H_
