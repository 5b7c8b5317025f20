# Sourced by scripts/engine-check.sh and scripts/engine-fusion-check.sh: the engine versions
# they check against, the pinned packages the engines' import chains need, and the installers.
# The callers set py (the Python whose pip installs) and work (the work directory).
vllm_version=0.33.0
sglang_version=0.5.23
# What the engines' import chains need beyond torch (found by importing the modules below with
# nothing else installed); vLLM's needs the first six. Pinned so that a release upstream cannot
# change what runs.
deps=(packaging==26.4 psutil==7.2.2 pyzmq==27.3.0 urllib3==2.8.0 regex==2026.11.19 numpy==2.4.6
      aiohappyeyeballs==2.7.1 aiohttp==3.14.5 aiosignal==1.4.0 anyio==4.16.0 attrs==26.1.0
      certifi==2026.10.19.post1 frozenlist==1.8.0 idna==3.20 ipython==9.18.1 msgspec==0.23.0
      multidict==7.2.1 orjson==3.13.0 pillow==13.0.0 propcache==0.5.4 pybase64==1.5.1
      pydantic==2.14.4 pydantic_core==2.50.5 pygments==2.21.0 requests==2.34.2
      starlette==1.10.0 tqdm==4.70.1 traitlets==5.16.1 typing_inspection==0.4.5 yarl==1.25.1)

pip_retry() {  # pip_retry PYTHON ARGS...: pip, tried three times (a dropped download)
  local p=$1 attempt
  shift
  for attempt in 1 2 3; do
    "$p" -m pip --disable-pip-version-check -q "$@" --retries 10 --timeout 60 && return 0
    [ $attempt = 3 ] || sleep 20
  done
  return 1
}
install_into() {  # install_into DIR STAMP PIP_ARGS...: pip install --target DIR, once per STAMP
  local dir=$1 stamp=$2
  shift 2
  [ -f "$dir/.engine-check" ] && [ "$(cat "$dir/.engine-check")" = "$stamp" ] && return 0
  rm -rf "$dir"
  pip_retry "$py" install --no-deps --no-compile --target "$dir" "$@" || return 1
  echo "$stamp" >"$dir/.engine-check"
}
wheel_of() {  # wheel_of NAME VERSION: the wheel's path, downloaded into WORKDIR/wheels if needed
  local w
  for w in "${TPAR_ENGINE_WHEELS:-/nonexistent}/$1-$2-"*.whl "$work/wheels/$1-$2-"*.whl; do
    [ -f "$w" ] && { echo "$w"; return 0; }
  done
  pip_retry "$py" download --no-deps --only-binary=:all: -d "$work/wheels" "$1==$2" >&2 ||
    return 1
  ls "$work/wheels/$1-$2-"*.whl 2>/dev/null | head -n 1
}

# What the engines' compiler passes and layers need on top of deps (scripts/engine-fusion-check.sh:
# vLLM's post-grad pass manager and IR ops, SGLang's norms and layer boundary), found the same
# way; installed with --no-deps, so none of them brings a torch of its own.
fusion_deps=(annotated_doc==0.0.7 annotated_types==0.8.0 apache_tvm_ffi==0.1.15.post2
             cachetools==8.0.2 cbor2==6.3.0 charset_normalizer==3.5.3 click==8.5.1
             cloudpickle==3.1.3 compressed_tensors==0.20.1 dill==0.4.1 einops==0.8.2
             fastapi==0.165.0 gguf==0.19.0 h11==0.16.0 hf_xet==1.8.0 httpcore2==2.16.2
             httpx2==2.16.2 huggingface_hub==2.4.0 jiter==0.19.0 llguidance==1.9.1 loguru==0.7.3
             markdown_it_py==4.3.0 mdurl==0.1.2 openai==3.57.0 openai_harmony==0.0.8
             opentelemetry_api==1.45.2 partial_json_parser==0.2.1.1.post7
             prometheus_client==0.26.0 py_cpuinfo==9.0.0 pyyaml==6.0.4 rich==15.0.0
             safetensors==0.8.0 sentencepiece==0.2.3 shellingham==1.5.4 sniffio==1.3.1
             tokenizers==0.23.3 torchvision==0.29.2 transformers==5.24.0 truststore==0.10.5
             typer==0.29.2 uvloop==0.23.0 xgrammar==0.2.9)
