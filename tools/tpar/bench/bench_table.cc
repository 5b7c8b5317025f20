// The table of `tpar bench`, laid out as nccl-tests lays out its own so that the scripts that
// read nccl-tests' output read this one: '#' starts every line that is not a row, and a row's
// first 13 columns are nccl-tests' in its order and widths. tpar's columns come after them.
#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "api/internal.h"
#include "tools/tpar/bench/bench.h"

namespace tpar_cli {
namespace {

// Widths of nccl-tests' columns: size 12, count 12, type 8, redop 6, root 6, then per half
// time 7, algbw 6, busbw 6, #wrong 6; two spaces between columns.
constexpr int kTimeWidth = 7;
constexpr int kBwWidth = 6;

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  vsnprintf(buf, sizeof(buf), f, ap);
  va_end(ap);
  return buf;
}

// `v` in at most `width` characters: two decimals when they fit, then fewer, then exponent
// form, so that a column never pushes the next one out of place.
std::string fitted(double v, int width) {
  for (int decimals = 2; decimals >= 0; --decimals) {
    std::string s = fmt("%*.*f", width, decimals, v);
    if (static_cast<int>(s.size()) <= width) return s;
  }
  return fmt("%*.*e", width, width >= 7 ? 1 : 0, v);
}

// -c 0 leaves a row's results unchecked: its #wrong columns say N/A, as nccl-tests' do.
bool checked(const BenchRow& r) { return r.wrong_out >= 0 || r.wrong_in >= 0; }

std::string half(double us, size_t bytes, int ranks, long long wrong) {
  const std::string w = wrong < 0 ? "N/A" : std::to_string(wrong);
  return "  " + fitted(us, kTimeWidth) + "  " + fitted(algBandwidth(bytes, us), kBwWidth) + "  " +
         fitted(busBandwidth(bytes, us, ranks), kBwWidth) + "  " + fmt("%6s", w.c_str());
}

}  // namespace

std::string tableHeader(const TableStyle& style) {
  const char* time = style.cputime ? "cputime" : "time";
  // Each half is 33 characters wide; its name sits over its middle.
  auto centered = [](const std::string& name) {
    const size_t width = 2 + kTimeWidth + 3 * (2 + kBwWidth);
    const size_t left = (width - name.size()) / 2;
    return std::string(left, ' ') + name + std::string(width - left - name.size(), ' ');
  };
  std::string s = fmt("# %10s  %12s  %8s  %6s  %6s", "", "", "", "", "") +
                  centered("out-of-place") + centered("in-place") + "\n";
  std::string names = fmt("# %10s  %12s  %8s  %6s  %6s", "size", "count", "type", "redop", "root");
  std::string units = fmt("# %10s  %12s  %8s  %6s  %6s", "(B)", "(elements)", "", "", "");
  for (int h = 0; h < 2; ++h) {
    names += fmt("  %7s  %6s  %6s  %6s", time, "algbw", "busbw", "#wrong");
    units += fmt("  %7s  %6s  %6s  %6s", "(us)", "(GB/s)", "(GB/s)", "");
  }
  if (style.timestamps) {
    names += fmt("  %19s", "timestamp");
    units += fmt("  %19s", "");
  }
  names += fmt("  %-17s %12s", "backend", "algo");
  units += fmt("  %-17s %12s", "", "");
  if (style.eager_and_graph) {
    names += fmt(" %9s %8s", "graph", "e-g");
    units += fmt(" %9s %8s", "(us)", "(us)");
  }
  if (style.floors) {
    names += fmt(" %9s %9s %7s", "floor", "phys", "x floor");
    units += fmt(" %9s %9s %7s", "(us)", "(us)", "");
  }
  return s + names + "\n" + units + "\n";
}

std::string tableRow(const BenchRow& r, const TableStyle& style) {
  std::string s = fmt("%12zu  %12zu  %8s  %6s  %6d", r.bytes, r.count,
                      ncclTestsTypeName(r.dtype), ncclTestsOpName(r.op), -1);
  s += half(r.us_out, r.bytes, r.ranks, r.wrong_out);
  s += half(r.us_in, r.bytes, r.ranks, r.wrong_in);
  if (style.timestamps) s += fmt("  %19s", r.timestamp.empty() ? "-" : r.timestamp.c_str());
  s += fmt("  %-17s %12s", r.backend.c_str(), r.chosen.empty() ? "-" : r.chosen.c_str());
  if (style.eager_and_graph && r.graph_us_out >= 0)
    s += " " + fitted(r.graph_us_out, 9) + " " + fitted(r.us_out - r.graph_us_out, 8);
  else if (style.eager_and_graph)
    s += fmt(" %9s %8s", "-", "-");
  if (style.floors && r.has_floor)
    s += fmt(" %9.2f %9s %7.2f", r.floor.us, r.has_phys ? fitted(r.phys.us, 9).c_str() : "-",
             r.floor.us > 0 ? r.us_out / r.floor.us : 0.0);
  else if (style.floors)
    s += fmt(" %9s %9s %7s", "-", "-", "-");
  if (!checked(r)) s += "  not checked";
  return s + "\n";
}

std::string tableFooter(const std::vector<BenchRow>& rows) {
  long long wrong = 0;
  size_t unchecked = 0;
  for (const BenchRow& r : rows) {
    wrong += std::max(0LL, r.wrong_out) + std::max(0LL, r.wrong_in);
    unchecked += checked(r) ? 0 : 1;
  }
  std::string s;
  if (!rows.empty() && unchecked == rows.size())
    s = fmt("# %-20s : N/A (not checked: -c 0)\n", "Out of bounds values");
  else
    s = fmt("# %-20s : %lld %s%s\n", "Out of bounds values", wrong, wrong ? "FAILED" : "OK",
            unchecked ? fmt(" (%zu rows not checked)", unchecked).c_str() : "");
  // nccl-tests averages the out-of-place and in-place bus bandwidth of every row; here per
  // backend and rank count, the number first as nccl-tests prints it.
  std::map<std::pair<std::string, int>, std::pair<double, int>> avg;
  std::vector<std::pair<std::string, int>> order;
  for (const BenchRow& r : rows) {
    const auto key = std::make_pair(r.backend, r.ranks);
    if (!avg.count(key)) order.push_back(key);
    auto& a = avg[key];
    a.first += busBandwidth(r.bytes, r.us_out, r.ranks) + busBandwidth(r.bytes, r.us_in, r.ranks);
    a.second += 2;
  }
  for (const auto& key : order) {
    const auto& a = avg[key];
    s += fmt("# %-20s : %g %s, %d ranks\n", "Avg bus bandwidth", a.first / a.second,
             key.first.c_str(), key.second);
  }
  return s + "#\n";
}

std::string tableComparisons(const std::vector<BenchRow>& rows) {
  std::string s;
  auto same = [](const BenchRow& a, const BenchRow& b) {
    return a.ranks == b.ranks && a.bytes == b.bytes && a.dtype == b.dtype && a.op == b.op;
  };
  bool any_nccl = false;
  for (const BenchRow& r : rows) any_nccl |= r.backend == "nccl";
  if (any_nccl) {
    s += "#\n# speed-up against nccl (nccl time / backend time, out of place)\n";
    for (const BenchRow& r : rows) {
      if (r.backend == "nccl") continue;
      for (const BenchRow& q : rows) {
        if (q.backend == "nccl" && same(q, r) && r.us_out > 0)
          s += fmt("#  %-17s %3d ranks %12zu B %8s %4s %7.2fx\n", r.backend.c_str(), r.ranks,
                   r.bytes, ncclTestsTypeName(r.dtype), ncclTestsOpName(r.op),
                   q.us_out / r.us_out);
      }
    }
  }
  // --wire: each format's rows against the lossless rows of the same backend ("tpar+none").
  bool any_lossless = false;
  for (const BenchRow& r : rows) any_lossless |= endsWith(r.backend, "+none");
  if (any_lossless) {
    s += "#\n# speed-up of each wire format against its backend's lossless rows (+none time / "
         "backend time, out of place; algo: what ran)\n";
    for (const BenchRow& r : rows) {
      const size_t plus = r.backend.rfind('+');
      if (plus == std::string::npos || endsWith(r.backend, "+none")) continue;
      const std::string lossless = r.backend.substr(0, plus) + "+none";
      for (const BenchRow& q : rows) {
        if (q.backend == lossless && same(q, r) && r.us_out > 0)
          s += fmt("#  %-17s %3d ranks %12zu B %8s %4s %-15s %7.2fx\n", r.backend.c_str(),
                   r.ranks, r.bytes, ncclTestsTypeName(r.dtype), ncclTestsOpName(r.op),
                   r.chosen.c_str(), q.us_out / r.us_out);
      }
    }
  }
  bool any_floor = false;
  for (const BenchRow& r : rows) any_floor |= r.has_floor;
  if (any_floor) {
    s += "#\n# against the host-link floor (out of place; floor = max(bytes written / write "
         "bandwidth, bytes read / read bandwidth) + rounds x hand-off)\n";
    for (const BenchRow& r : rows) {
      if (!r.has_floor) continue;
      s += fmt("#  %-17s %3d ranks %12zu B %-13s %8.2f MB written %8.2f MB read %d rounds: "
               "floor %8.2f us, time %8.2f us, %6.2fx\n",
               r.backend.c_str(), r.ranks, r.bytes, r.chosen.c_str(), r.floor.write_bytes / 1e6,
               r.floor.read_bytes / 1e6, r.floor.rounds, r.floor.us, r.us_out,
               r.floor.us > 0 ? r.us_out / r.floor.us : 0.0);
      if (r.has_phys)
        s += fmt("#  %-17s %3d ranks %12zu B phys: %s, %d rounds, floor %8.2f us, time over it "
                 "%6.2fx\n",
                 r.backend.c_str(), r.ranks, r.bytes, r.phys_algo.c_str(), r.phys.rounds,
                 r.phys.us, r.phys.us > 0 ? r.us_out / r.phys.us : 0.0);
      if (r.has_phys && r.phys.both_us > 0)
        s += fmt("#  %-17s %3d ranks %12zu B phys, both ways at the rate measured with both: "
                 "floor %8.2f us, time over it %6.2fx\n",
                 r.backend.c_str(), r.ranks, r.bytes, r.phys.both_us, r.us_out / r.phys.both_us);
    }
  }
  return s;
}

bool lowestHostFloor(size_t bytes, int nranks, int ranks_per_link, const HostLinkSummary& link,
                     HostLinkFloor* out, std::string* algo) {
  bool any = false;
  double min_both = 0;
  for (const tpar::Algorithm& a : tpar::algorithms()) {
    if (a.needs_islands || nranks < a.min_ranks) continue;
    HostLinkFloor f;
    if (!hostLinkFloor(a.name, bytes, nranks, ranks_per_link, link.write_gbps, link.read_gbps,
                       link.rtt_us, &f, link.both_gbps))
      continue;
    if (f.both_us > 0 && (min_both == 0 || f.both_us < min_both)) min_both = f.both_us;
    if (!any || f.us < out->us) {
      *out = f;
      *algo = a.name;
      any = true;
    }
  }
  // The both-ways floor is the lowest over the algorithms too, whichever sets it.
  if (any) out->both_us = min_both;
  return any;
}

std::string hostCostHeader() {
  return fmt("# %10s  %-17s %12s %5s  %9s %9s  %9s %9s  %9s  %6s\n", "size", "backend", "algo",
             "ranks", "call", "call", "bare", "bare", "call-bare", "#wrong") +
         fmt("# %10s  %-17s %12s %5s  %9s %9s  %9s %9s  %9s  %6s\n", "(B)", "", "", "",
             "med(us)", "min(us)", "med(us)", "min(us)", "(us)", "");
}

std::string hostCostLine(const HostCostRow& r) {
  const std::string w = r.wrong < 0 ? "N/A" : std::to_string(r.wrong);
  return fmt("%12zu  %-17s %12s %5d  %s %s  %s %s  %s  %6s%s\n", r.bytes, r.backend.c_str(),
             r.chosen.empty() ? "-" : r.chosen.c_str(), r.ranks, fitted(r.median_us, 9).c_str(),
             fitted(r.min_us, 9).c_str(), fitted(r.bare_median_us, 9).c_str(),
             fitted(r.bare_min_us, 9).c_str(), fitted(r.overheadUs(), 9).c_str(), w.c_str(),
             r.wrong < 0 ? "  not checked" : "");
}

nlohmann::json hostCostToJson(const HostCostRow& r) {
  return {{"backend", r.backend},
          {"ranks", r.ranks},
          {"bytes", r.bytes},
          {"chosen", r.chosen},
          {"batch", r.batch},
          {"batches", r.batches},
          {"median_us", r.median_us},
          {"min_us", r.min_us},
          {"bare_median_us", r.bare_median_us},
          {"bare_min_us", r.bare_min_us},
          {"overhead_us", r.overheadUs()},
          {"bare_overlap", r.overlap},
          {"wrong", r.wrong},
          {"checked", r.wrong >= 0}};
}

std::string fallbackNote(const std::string& backend, int ranks, const std::string& fallback) {
  const std::string forced = backend.substr(backend.find(':') + 1);
  return fmt("# %s at %d ranks: fell back to %s; %s did not run, its rows are %s's\n",
             backend.c_str(), ranks, fallback.c_str(), forced.c_str(),
             fallback.substr(0, fallback.find(' ')).c_str());
}

std::string closingLines(const std::vector<BenchRow>& rows) {
  std::string s;
  std::map<std::pair<std::string, int>, std::string> fallbacks;
  long long wrong = 0;
  size_t checked_rows = 0;
  for (const BenchRow& r : rows) {
    if (!r.fallback.empty() && fallbacks.emplace(std::make_pair(r.backend, r.ranks), r.fallback).second)
      s += fallbackNote(r.backend, r.ranks, r.fallback);
    wrong += std::max(0LL, r.wrong_out) + std::max(0LL, r.wrong_in);
    checked_rows += checked(r) ? 1 : 0;
  }
  const size_t unchecked = rows.size() - checked_rows;
  const std::string not_checked =
      unchecked ? fmt("%zu rows not checked (-c 0): their results were never compared", unchecked)
                : "";
  if (wrong)
    s += fmt("# FAILED: %lld wrong elements in %zu checked rows%s\n", wrong, checked_rows,
             unchecked ? ("; " + not_checked).c_str() : "");
  else if (checked_rows)
    s += fmt("# ok: 0 wrong elements in %zu checked rows%s\n", checked_rows,
             unchecked ? ("; " + not_checked).c_str() : "");
  else if (unchecked)
    s += "# not checked: " + not_checked + "\n";
  return s;
}

}  // namespace tpar_cli
