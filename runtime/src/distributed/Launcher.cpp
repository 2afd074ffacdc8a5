//===- Launcher.cpp - one process per rank --------------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/distributed/Launcher.h"

#include <arpa/inet.h>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace partita::runtime;
using Clock = std::chrono::steady_clock;

extern char **environ;

namespace {

bool parseInt(const char *text, int64_t &value) {
  if (!text || !*text)
    return false;
  char *end = nullptr;
  errno = 0;
  long long parsed = std::strtoll(text, &end, 10);
  if (*end != '\0' || errno != 0)
    return false;
  value = parsed;
  return true;
}

} // namespace

Status partita::runtime::readRankEnvironment(RankEnvironment &environment,
                                             bool &found) {
  found = false;
  struct Source {
    const char *name, *rank, *size, *localRank;
  };
  const Source sources[] = {
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
      {"mpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
       "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
  };
  for (const Source &source : sources) {
    const char *rankText = std::getenv(source.rank);
    const char *sizeText = std::getenv(source.size);
    if (!rankText && !sizeText)
      continue;
    std::string what = std::string("the ") + source.name + " environment (" +
                       source.rank + ", " + source.size + ")";
    int64_t rank = 0, size = 0, localRank = 0;
    if (!parseInt(rankText, rank) || !parseInt(sizeText, size) || size < 1 ||
        rank < 0 || rank >= size || size > INT32_MAX)
      return Status::error(what + " is incomplete or invalid: " + source.rank +
                           "=" + (rankText ? rankText : "(unset)") + ", " +
                           source.size + "=" +
                           (sizeText ? sizeText : "(unset)"));
    const char *localText = std::getenv(source.localRank);
    if (localText && (!parseInt(localText, localRank) || localRank < 0))
      return Status::error(what + ": invalid " + source.localRank + "=" +
                           localText);
    if (!localText)
      localRank = rank;
    const char *address = std::getenv("MASTER_ADDR");
    const char *portText = std::getenv("MASTER_PORT");
    int64_t port = 0;
    if (size > 1 && (!address || !*address || !parseInt(portText, port) ||
                     port <= 0 || port > 65535))
      return Status::error(what + " names rank " + std::to_string(rank) +
                           " of " + std::to_string(size) +
                           ", but MASTER_ADDR and MASTER_PORT (rank 0's "
                           "address and a free port) are not both set");
    environment.rank = int32_t(rank);
    environment.worldSize = int32_t(size);
    environment.localRank = int32_t(localRank);
    environment.masterAddress = address ? address : "127.0.0.1";
    environment.masterPort = uint16_t(port);
    environment.source = source.name;
    found = true;
    return Status::ok();
  }
  return Status::ok();
}

Status partita::runtime::findFreePort(uint16_t &port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return Status::error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  if (::bind(fd, reinterpret_cast<sockaddr *>(&address), sizeof(address)) !=
          0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr *>(&address), &length) != 0) {
    std::string error = std::strerror(errno);
    ::close(fd);
    return Status::error("finding a free port: " + error);
  }
  port = ntohs(address.sin_port);
  ::close(fd);
  return Status::ok();
}

namespace {

struct Child {
  int32_t rank = 0;
  pid_t pid = -1;
  int stderrFd = -1;
  std::string pending;  // Stderr not yet forwarded (an incomplete line).
  std::string lastLine; // The last non-empty line on stderr.
  bool running = false;
  int status = 0;
};

/// Forwards what `child` wrote to stderr, line by line; false at EOF.
bool forward(Child &child) {
  char buffer[4096];
  ssize_t count = ::read(child.stderrFd, buffer, sizeof(buffer));
  if (count < 0 && (errno == EAGAIN || errno == EINTR))
    return true;
  if (count <= 0) {
    if (!child.pending.empty()) {
      std::fprintf(stderr, "%s\n", child.pending.c_str());
      child.lastLine = child.pending;
      child.pending.clear();
    }
    ::close(child.stderrFd);
    child.stderrFd = -1;
    return false;
  }
  child.pending.append(buffer, size_t(count));
  size_t newline;
  while ((newline = child.pending.find('\n')) != std::string::npos) {
    std::string line = child.pending.substr(0, newline);
    child.pending.erase(0, newline + 1);
    std::fprintf(stderr, "%s\n", line.c_str());
    if (!line.empty())
      child.lastLine = line;
  }
  return true;
}

std::string exitString(int status) {
  if (WIFEXITED(status))
    return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return std::string("signal ") + ::strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

/// Reads stderr and reaps children for up to `slice`.
void pump(std::vector<Child> &children, int sliceMs) {
  std::vector<pollfd> fds;
  std::vector<Child *> owners;
  for (Child &child : children)
    if (child.stderrFd >= 0) {
      fds.push_back({child.stderrFd, POLLIN, 0});
      owners.push_back(&child);
    }
  if (!fds.empty()) {
    if (::poll(fds.data(), fds.size(), sliceMs) > 0)
      for (size_t i = 0; i < fds.size(); ++i)
        if (fds[i].revents)
          forward(*owners[i]);
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(sliceMs));
  }
  for (Child &child : children) {
    if (!child.running)
      continue;
    int status = 0;
    if (::waitpid(child.pid, &status, WNOHANG) == child.pid) {
      child.running = false;
      child.status = status;
    }
  }
}

} // namespace

Status partita::runtime::launchRanks(const LaunchOptions &options) {
  if (options.ranks < 1)
    return Status::error("launching " + std::to_string(options.ranks) +
                         " ranks: need at least one");
  uint16_t port = 0;
  PARTITA_RETURN_IF_ERROR(findFreePort(port));
  std::vector<Child> children(size_t(options.ranks));
  Status failure = Status::ok();
  for (int32_t rank = 0; rank < options.ranks; ++rank) {
    Child &child = children[size_t(rank)];
    child.rank = rank;
    int pipeFds[2];
    if (::pipe2(pipeFds, O_CLOEXEC) != 0) {
      failure = Status::error(std::string("pipe: ") + std::strerror(errno));
      break;
    }
    // The child's environment: ours with the rank's variables replaced.
    std::vector<std::string> variables = {
        "RANK=" + std::to_string(rank),
        "WORLD_SIZE=" + std::to_string(options.ranks),
        "LOCAL_RANK=" + std::to_string(rank),
        "LOCAL_WORLD_SIZE=" + std::to_string(options.ranks),
        "MASTER_ADDR=127.0.0.1",
        "MASTER_PORT=" + std::to_string(port)};
    for (char **entry = environ; *entry; ++entry) {
      std::string text = *entry;
      std::string name = text.substr(0, text.find('='));
      bool replaced = false;
      for (const std::string &variable : variables)
        replaced |= variable.compare(0, name.size() + 1, name + "=") == 0;
      // The launcher's own MPI/SLURM rank must not leak into the children.
      replaced |= name.rfind("OMPI_COMM_WORLD_", 0) == 0 ||
                  name == "SLURM_PROCID" || name == "SLURM_NTASKS" ||
                  name == "SLURM_LOCALID";
      if (!replaced)
        variables.push_back(text);
    }
    std::vector<char *> envp, argv;
    for (std::string &variable : variables)
      envp.push_back(variable.data());
    envp.push_back(nullptr);
    std::vector<std::string> arguments = {options.executable};
    arguments.insert(arguments.end(), options.arguments.begin(),
                     options.arguments.end());
    for (std::string &argument : arguments)
      argv.push_back(argument.data());
    argv.push_back(nullptr);

    pid_t pid = ::fork();
    if (pid < 0) {
      ::close(pipeFds[0]);
      ::close(pipeFds[1]);
      failure = Status::error(std::string("fork: ") + std::strerror(errno));
      break;
    }
    if (pid == 0) {
      ::dup2(pipeFds[1], STDERR_FILENO);
      ::execve(options.executable.c_str(), argv.data(), envp.data());
      std::fprintf(stderr, "cannot run %s: %s\n", options.executable.c_str(),
                   std::strerror(errno));
      ::_exit(127);
    }
    ::close(pipeFds[1]);
    ::fcntl(pipeFds[0], F_SETFL, O_NONBLOCK);
    child.pid = pid;
    child.stderrFd = pipeFds[0];
    child.running = true;
  }

  // Wait for all, or for the first failure.
  const Child *failed = nullptr;
  while (failure) {
    pump(children, 50);
    bool anyRunning = false;
    for (const Child &child : children) {
      anyRunning |= child.running;
      if (!child.running && child.pid > 0 && !failed &&
          !(WIFEXITED(child.status) && WEXITSTATUS(child.status) == 0))
        failed = &child;
    }
    if (failed || !anyRunning)
      break;
  }

  // Stop the others: SIGTERM, then SIGKILL after the grace period.
  bool stopping = failed || !failure;
  if (stopping) {
    for (Child &child : children)
      if (child.running)
        ::kill(child.pid, SIGTERM);
    auto deadline = Clock::now() + options.killGrace;
    while (Clock::now() < deadline) {
      bool anyRunning = false;
      for (const Child &child : children)
        anyRunning |= child.running;
      if (!anyRunning)
        break;
      pump(children, 20);
    }
    for (Child &child : children)
      if (child.running) {
        ::kill(child.pid, SIGKILL);
        ::waitpid(child.pid, &child.status, 0);
        child.running = false;
      }
  }
  // Drain what is left on the pipes.
  for (Child &child : children)
    while (child.stderrFd >= 0) {
      pollfd entry{child.stderrFd, POLLIN, 0};
      if (::poll(&entry, 1, 1000) <= 0) {
        ::close(child.stderrFd);
        child.stderrFd = -1;
        break;
      }
      forward(child);
    }
  if (!failure)
    return failure;
  if (!failed)
    return Status::ok();
  std::string message = failed->lastLine;
  for (const char *prefix : {"partita-run: error: ", "partita-run: "})
    if (message.rfind(prefix, 0) == 0) {
      message.erase(0, std::strlen(prefix));
      break;
    }
  return Status::error("rank " + std::to_string(failed->rank) + " failed (" +
                       exitString(failed->status) + ")" +
                       (message.empty() ? "" : ": " + message) +
                       "; the other ranks were stopped");
}
