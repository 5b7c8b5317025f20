#include "tools/tpar/common/spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

extern char** environ;

namespace tpar_cli {

ChildFile::ChildFile() {
  char tmpl[] = "/tmp/tpar_child_XXXXXX";
  const int fd = mkstemp(tmpl);
  if (fd >= 0) {
    close(fd);
    path_ = tmpl;
  }
}

ChildFile::~ChildFile() {
  if (!path_.empty()) unlink(path_.c_str());
}

std::vector<std::string> workerArgs(int rank, int world, const std::string& id,
                                    const std::string& out_flag, const std::string& out_path) {
  return {"--worker-rank", std::to_string(rank), "--worker-world", std::to_string(world),
          "--worker-id", id, out_flag, out_path};
}

std::string selfPath() {
  char self[4096] = {0};
  if (readlink("/proc/self/exe", self, sizeof(self) - 1) <= 0) return "";
  return self;
}

std::string runAll(const std::vector<std::vector<std::string>>& cmds,
                   const std::vector<std::string>& extra_env, int timeout_s) {
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e) envs.push_back(*e);
  for (const std::string& kv : extra_env) envs.push_back(kv);
  std::vector<char*> cenv;
  for (auto& e : envs) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  std::vector<pid_t> pids;
  std::string err;
  for (const auto& cmd : cmds) {
    std::vector<char*> argv;
    for (const auto& a : cmd) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = 0;
    if (posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), cenv.data()) != 0) {
      err = "cannot start " + cmd[0];
      break;
    }
    pids.push_back(pid);
  }
  posix_spawn_file_actions_destroy(&actions);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  std::vector<bool> done(pids.size(), false);
  size_t left = pids.size();
  while (left > 0) {
    for (size_t i = 0; i < pids.size(); ++i) {
      int status = 0;
      if (done[i] || waitpid(pids[i], &status, WNOHANG) != pids[i]) continue;
      done[i] = true;
      --left;
      if ((!WIFEXITED(status) || WEXITSTATUS(status) != 0) && err.empty())
        err = "rank " + std::to_string(i) + " process failed (status " + std::to_string(status) + ")";
    }
    if (left > 0 && (!err.empty() || std::chrono::steady_clock::now() > deadline)) {
      // A failed rank leaves its peers waiting (boundedly); do not wait for them.
      if (err.empty()) err = "rank processes did not finish within " + std::to_string(timeout_s) + " s";
      for (size_t i = 0; i < pids.size(); ++i)
        if (!done[i]) kill(pids[i], SIGKILL);
      for (size_t i = 0; i < pids.size(); ++i)
        if (!done[i]) waitpid(pids[i], nullptr, 0);
      break;
    }
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return err;
}


}  // namespace tpar_cli
