// The CLI's commands. Each takes its arguments like a program's main (argv[0] is the command's
// name), handles --help itself, and returns the exit code. They throw cli::UsageError for bad
// usage (exit 2) and spikejit::Error for bad files or values (exit 1); main reports both.
#pragma once

namespace spikejit::cli {

int cmd_check(int argc, char** argv);
int cmd_grad(int argc, char** argv);
int cmd_run(int argc, char** argv);
int cmd_emit(int argc, char** argv);
int cmd_cache(int argc, char** argv);

}  // namespace spikejit::cli
