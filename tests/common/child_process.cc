#include "common/child_process.h"

#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace tpar_test {
namespace {

int statusOf(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st); }

}  // namespace

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !reaped_) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (!log_.empty()) unlink(log_.c_str());
}

bool ChildProcess::start(const std::vector<std::string>& argv,
                         const std::vector<std::string>& env) {
  if (argv.empty() || pid_ > 0) return false;
  char path[] = "/tmp/tpar_child_XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return false;
  log_ = path;
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e) {
    // A child runs what its argv's filter names. GoogleTest's sharding variables, set for the
    // parent (ctest, or a run split over machines), would make it run its shard of that filter,
    // mostly nothing, and fail the parent's check for no reason of its own.
    if (std::strncmp(*e, "GTEST_TOTAL_SHARDS=", 19) == 0 ||
        std::strncmp(*e, "GTEST_SHARD_INDEX=", 18) == 0 ||
        std::strncmp(*e, "GTEST_SHARD_STATUS_FILE=", 24) == 0)
      continue;
    bool overridden = false;
    for (const std::string& kv : env) {
      const std::string name = kv.substr(0, kv.find('=') + 1);
      overridden |= std::strncmp(*e, name.c_str(), name.size()) == 0;
    }
    if (!overridden) envs.push_back(*e);
  }
  envs.insert(envs.end(), env.begin(), env.end());
  std::vector<char*> cargv, cenv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const auto& e : envs) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fd, 1);
  posix_spawn_file_actions_adddup2(&actions, fd, 2);
  const int rc = posix_spawnp(&pid_, cargv[0], &actions, nullptr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&actions);
  close(fd);
  if (rc != 0) pid_ = -1;
  return rc == 0;
}

int ChildProcess::wait(int timeout_s) {
  if (pid_ <= 0) return -2;
  if (reaped_) return status_;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (true) {
    int st = 0;
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
      reaped_ = true;
      status_ = statusOf(st);
      return status_;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      reaped_ = true;
      status_ = -1;
      return status_;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

bool ChildProcess::running() {
  if (pid_ <= 0 || reaped_) return false;
  int st = 0;
  if (waitpid(pid_, &st, WNOHANG) == pid_) {
    reaped_ = true;
    status_ = statusOf(st);
    return false;
  }
  return true;
}

std::string ChildProcess::output() const {
  if (log_.empty()) return "";
  std::ifstream f(log_);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

int runChild(const std::vector<std::string>& argv, const std::vector<std::string>& env,
             int timeout_s, std::string* output) {
  ChildProcess child;
  if (!child.start(argv, env)) {
    *output = "could not start " + (argv.empty() ? std::string("(nothing)") : argv[0]);
    return -2;
  }
  const int rc = child.wait(timeout_s);
  *output = child.output();
  if (rc == -1) *output += "\n[killed after timeout]";
  return rc;
}

}  // namespace tpar_test
