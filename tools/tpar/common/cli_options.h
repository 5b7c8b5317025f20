// Options that several `tpar` subcommands take the same way: a message-size range (nccl-tests'
// -b/-e/-f, or an explicit --sizes list) and a datatype name.
#ifndef TPAR_TOOLS_CLI_OPTIONS_H_
#define TPAR_TOOLS_CLI_OPTIONS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "tpar/tpar.h"

namespace tpar_cli {

// Registers -b/--minbytes, -e/--maxbytes, -f/--stepfactor and --sizes (sizes take K/M/G).
// A malformed size is recorded in *error (CLI11 callbacks cannot fail with our text).
// `unit` names one step in the help text ("message", "bucket"); `min_factor` is the smallest
// -f (1 where -f 1 means nccl-tests' additive steps of -i).
void addSizeOptions(CLI::App* app, size_t* min_bytes, size_t* max_bytes, double* factor,
                    std::vector<size_t>* sizes, std::shared_ptr<std::string> error,
                    const std::string& unit, double min_factor = 1.01);

// "4096", "64K", "8M" for the help text's defaults.
std::string bytesText(size_t bytes);

// Parses a comma-separated list with `one` (false: the item is bad); "" or the error naming
// `option` and the item.
std::string parseList(const std::string& option, const std::string& text,
                      const std::function<bool(const std::string&)>& one);

// min, min*factor, ... up to max, and max itself.
std::vector<size_t> sizeRange(size_t min_bytes, size_t max_bytes, double factor);

// "bfloat16"/"bf16", "float16"/"half"/"fp16", "float32"/"float"/"fp32".
bool parseDatatypeName(const std::string& name, tparDataType_t* out);

// "auto", "host", "p2p" (as TPAR_TRANSPORT takes them) to tparConfig_t::transport (0, 1, 2).
bool parseTransportName(const std::string& name, int* out);
// The name of a tparConfig_t::transport value; "env" for -1 (TPAR_TRANSPORT decides).
const char* transportOptionName(int transport);

// The TPAR_WIRE spelling of a tparWire_t value ("env" for TPAR_CONFIG_UNDEF_INT).
const char* wireOptionName(int wire);

// "" when `path` can be written (created, or an existing file replaced), else why not. Checked
// before a run, so that a bad --json path is found before the minutes of measuring; leaves the
// file system as it was. A path that is not a regular file (a FIFO, a device, a directory) is
// refused at once, never waited on (NOTE [user files] in src/base/user_file.h).
std::string checkOutputPath(const std::string& path);

// Makes `text` the content of the output file `path` the same way; "" or why not.
std::string writeOutputFile(const std::string& path, const std::string& text);

}  // namespace tpar_cli

#endif  // TPAR_TOOLS_CLI_OPTIONS_H_
