// dist_env.h: where this process sits in a multi-process (one process per GPU) run, and the
// bootstrap that hands rank 0's NCCL unique id to every rank. Host-only C++: no CUDA, no NCCL,
// no MPI, so it runs (and is tested) anywhere.
//
// Discovery, first match wins:
//   LLMC_RANK, LLMC_WORLD_SIZE, LLMC_LOCAL_RANK             scripts/run/launch.sh (or set by hand)
//   OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK                 OpenMPI's mpirun
//   SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_LOCALID        Slurm's srun (a job step: the batch
//                                                            script itself has no step size)
//   none of these                                           one process, rank 0 of 1
// The local rank is the CUDA device the process uses.
//
// Bootstrap: rank 0 creates the id; the other ranks receive it, by
//   TCP  rank 0 listens on (LLMC_)MASTER_ADDR:(LLMC_)MASTER_PORT (default 127.0.0.1:29517);
//        each other rank connects (retrying until the timeout) and sends a hello (rank, world
//        size, config fingerprint); once all have, rank 0 checks them and answers each with
//        the id, or with the first disagreement so that every rank exits with one sentence.
//   file rank 0 writes the answer to a file on a filesystem every rank sees (hidden temporary
//        name, then rename); the others poll for it, ignore a file written more than a minute
//        before they reached the bootstrap (a leftover of an earlier run that crashed; a run
//        that got going removed its file), and check the fingerprint themselves. Rank 0 removes
//        the file once the communicator exists (bootstrap_cleanup).
// Every wait is bounded by the timeout (LLMC_BOOTSTRAP_TIMEOUT seconds, default 300), so a rank
// that never starts makes the others exit with a sentence instead of hanging.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace llmc {

constexpr int kDefaultMasterPort = 29517;
constexpr size_t kBootstrapIdBytes = 128;  // sizeof(ncclUniqueId)

struct DistEnv {
    int rank = 0, world_size = 1, local_rank = 0;
    std::string source = "single process";  // which variables said so, for messages
};

// Reads the environment as above. Returns false with one sentence in *why on a malformed or
// inconsistent value (not a number, rank outside the world, a partial set).
bool dist_env_from_environment(DistEnv* env, std::string* why);

struct BootstrapOptions {
    std::string addr = "127.0.0.1";  // rank 0's address (TCP)
    int port = kDefaultMasterPort;
    std::string init_file;  // non-empty: exchange through this file instead of TCP
    double timeout_s = 300.0;
};

// The options from LLMC_MASTER_ADDR / MASTER_ADDR, LLMC_MASTER_PORT / MASTER_PORT,
// LLMC_INIT_FILE and LLMC_BOOTSTRAP_TIMEOUT; init_file_flag (--init-file) wins over
// LLMC_INIT_FILE. Returns false with a sentence on a bad value.
bool bootstrap_options_from_environment(const std::string& init_file_flag, BootstrapOptions* opt,
                                        std::string* why);

// Shares rank 0's id (kBootstrapIdBytes; input on rank 0, output elsewhere) and checks that
// every rank has the same world size and fingerprint (a hash of what must agree: options,
// build). Returns false with one sentence in *why on a timeout, a network error or a mismatch.
bool bootstrap_share_id(const DistEnv& env, const BootstrapOptions& opt, uint64_t fingerprint,
                        uint8_t* id, std::string* why);

// After the communicator exists: rank 0 removes the init file (nothing to do over TCP).
void bootstrap_cleanup(const DistEnv& env, const BootstrapOptions& opt);

}  // namespace llmc
