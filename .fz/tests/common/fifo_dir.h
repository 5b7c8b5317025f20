// A fresh temporary directory holding a FIFO, for the tests of paths that are not regular files
// (NOTE [user files] in src/base/user_file.h). Opening the FIFO blocks until its other end is
// opened, so a test runs whatever might open it in a child process with a bound
// (common/child_process.h) and passes the directory in kEnvName.
#ifndef TPAR_TESTS_COMMON_FIFO_DIR_H_
#define TPAR_TESTS_COMMON_FIFO_DIR_H_

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace tpar_test {

class FifoDir {
 public:
  static constexpr const char* kEnvName = "TPAR_TEST_FIFO_DIR";

  FifoDir() {
    char name[] = "/tmp/tpar_fifo_dir_XXXXXX";
    if (mkdtemp(name) == nullptr) return;
    dir_ = name;
    if (mkfifo(fifo().c_str(), 0600) != 0) dir_.clear();
  }
  // Removes the directory and what the test left in it (plain entries only).
  ~FifoDir() {
    if (dir_.empty()) return;
    if (DIR* d = opendir(dir_.c_str())) {
      while (dirent* e = readdir(d)) {
        const std::string name = e->d_name;
        if (name != "." && name != "..") unlink((dir_ + "/" + name).c_str());
      }
      closedir(d);
    }
    rmdir(dir_.c_str());
  }
  FifoDir(const FifoDir&) = delete;
  FifoDir& operator=(const FifoDir&) = delete;

  // "" when the directory or the FIFO could not be made.
  const std::string& dir() const { return dir_; }
  std::string fifo() const { return dir_ + "/fifo"; }
  // NAME=dir, for a child's environment.
  std::string env() const { return std::string(kEnvName) + "=" + dir_; }

  // In a child: the FIFO of the parent's FifoDir ("" when kEnvName is not set).
  static std::string fifoFromEnv() {
    const char* d = std::getenv(kEnvName);
    return d != nullptr && *d != '\0' ? std::string(d) + "/fifo" : std::string();
  }

 private:
  std::string dir_;
};

}  // namespace tpar_test

#endif  // TPAR_TESTS_COMMON_FIFO_DIR_H_
