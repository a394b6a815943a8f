#!/usr/bin/env bash
# Copy header-only dependencies that a GPU machine may lack (CLI11) into .deps/ (ignored
# by git), so that a copy of the checkout brings them along to a machine without them:
# configure there with CMAKE_PREFIX_PATH=.deps and CMake finds their configs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rm -rf .deps && mkdir -p .deps/include .deps/share/cmake
cp -r /usr/include/CLI .deps/include/
cp -r /usr/share/cmake/CLI11 .deps/share/cmake/
echo "staged: $(du -sh .deps | cut -f1) in .deps/"
