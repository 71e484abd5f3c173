# The worker image: `jobservice worker` with torch, in one of three flavours.
#
#   docker build -f docker/worker.Dockerfile --build-arg FLAVOUR=cpu -t jobservice-worker:0.2.0-cpu \
#     --build-arg VERSION=0.2.0 --build-arg COMMIT=$(git rev-parse HEAD) .
#
# FLAVOUR    base image (build argument)                              torch
# cpu        BASE_IMAGE=debian:bookworm-slim (Debian 12, Python 3.11)  torch==2.13.0 CPU build (wheelhouse
#                                                                      or download.pytorch.org/whl/cpu)
# cuda       CUDA_BASE_IMAGE=nvidia/cuda:12.8.1-runtime-ubuntu22.04    torch==2.13.0 from TORCH_INDEX_URL
#            (Ubuntu 22.04; python3.11 from Ubuntu's universe)         (default .../whl/cu128: CUDA 12.8,
#                                                                      matching the base; host driver >= 570)
# ascend     CANN_BASE_IMAGE=ascendai/cann:8.5.0-910b-ubuntu22.04-py3.11  torch==2.13.0 (CPU index) and
#            (CANN toolkit in /usr/local/Ascend, Python 3.11)          torch-npu==TORCH_NPU_VERSION (PyPI);
#                                                                      CANN and torch-npu must be a pair
#                                                                      from Ascend's compatibility table
#
# Only the cpu flavour was built and run where this was written (no registry, no cards there); cuda
# and ascend were checked as Dockerfiles only (docker/README.md says how). Build from the repository
# root with BuildKit (only the chosen flavour's stages are built).
ARG FLAVOUR=cpu
ARG BASE_IMAGE=debian:bookworm-slim
ARG CUDA_BASE_IMAGE=nvidia/cuda:12.8.1-runtime-ubuntu22.04
ARG CANN_BASE_IMAGE=ascendai/cann:8.5.0-910b-ubuntu22.04-py3.11

# --- per-flavour runtime bases: Python 3.11 as `python3`, ffmpeg, tini --------------------------
# (The same instructions as api.Dockerfile's base stage, so the two images share these layers.)
FROM ${BASE_IMAGE} AS base-cpu
ENV DEBIAN_FRONTEND=noninteractive \
    LANG=C.UTF-8 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv ffmpeg tini ca-certificates \
 && rm -rf /var/lib/apt/lists/*

FROM ${CUDA_BASE_IMAGE} AS base-cuda
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3.11 python3.11-venv ffmpeg tini ca-certificates \
 && ln -sf /usr/bin/python3.11 /usr/local/bin/python3 \
 && rm -rf /var/lib/apt/lists/*

FROM ${CANN_BASE_IMAGE} AS base-ascend
ENV DEBIAN_FRONTEND=noninteractive
# Root only to install packages; the final stage runs as 10001.
# hadolint ignore=DL3002
USER 0
# The CANN image brings Python 3.11 (its -py3.11 tag) and the toolkit; add ffmpeg and tini.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ffmpeg tini ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -c "import sys; assert sys.version_info[:2] == (3, 11), sys.version"

# hadolint ignore=DL3006
FROM base-${FLAVOUR} AS base
ENV LANG=C.UTF-8 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

# --- build: the venv at /opt/jobservice ------------------------------------------------------------
FROM base AS build
COPY docker/wheelhouse/ /wheels/
COPY pyproject.toml README.md /src/
COPY jobservice /src/jobservice
COPY workers /src/workers
COPY docker/build-venv.sh /usr/local/bin/build-venv
ARG FLAVOUR
ARG PIP_OFFLINE=auto
ARG TORCH_VERSION=2.13.0
ARG TORCH_NPU_VERSION=2.13.0
ARG TORCH_INDEX_URL=
RUN PIP_OFFLINE=${PIP_OFFLINE} TORCH_VERSION=${TORCH_VERSION} TORCH_NPU_VERSION=${TORCH_NPU_VERSION} \
    TORCH_INDEX_URL=${TORCH_INDEX_URL} build-venv worker ${FLAVOUR}

# --- the image -------------------------------------------------------------------------------------
FROM base AS worker
ARG FLAVOUR
ARG VERSION=0.0.0
ARG COMMIT=unknown
# The group that may open the cards' device files (Ascend: the host's HwHiAiUser group id; give
# it with `group_add` in compose or `--group-add` if it differs).
ARG DEVICE_GID=1000
LABEL org.opencontainers.image.title="jobservice-worker" \
      org.opencontainers.image.description="jobservice worker (${FLAVOUR}): Celery, torch, ffmpeg" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}" \
      io.jobservice.flavour="${FLAVOUR}"
RUN (getent group "${DEVICE_GID}" >/dev/null || groupadd --system --gid "${DEVICE_GID}" cards) \
 && groupadd --system --gid 10001 jobservice \
 && useradd --system --uid 10001 --gid 10001 --groups "${DEVICE_GID}" \
      --home-dir /var/lib/jobservice --create-home jobservice
COPY --from=build /opt/jobservice /opt/jobservice
COPY docker/entrypoint.sh /usr/local/bin/jobservice-entrypoint
COPY docker/healthcheck.py /usr/local/lib/jobservice/healthcheck.py
ENV PATH=/opt/jobservice/bin:$PATH \
    JOBSERVICE_COMMIT=${COMMIT} \
    JOBSERVICE_VAR_DIR=/var/lib/jobservice \
    JOBSERVICE_WORKER_DEVICES=cpu
USER 10001
WORKDIR /var/lib/jobservice
# No port: workers only talk to Redis, the database and the object store.
HEALTHCHECK --interval=20s --timeout=10s --start-period=60s --retries=3 \
  CMD ["python", "/usr/local/lib/jobservice/healthcheck.py", "worker"]
ENTRYPOINT ["tini", "--", "jobservice-entrypoint"]
CMD ["jobservice", "worker"]
