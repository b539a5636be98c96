#!/usr/bin/env bash
# The tracked C++ and CUDA sources follow .clang-format (clang-format 14, Debian 12's).
#   check_format.sh SOURCE_DIR CLANG_FORMAT
# Exit 0: every file formatted; 1: the files that are not, with the first lines of their diff;
# 77: no clang-format 14 here (another version formats differently: the check would be wrong), or
# the source folder is not a git checkout.
set -uo pipefail
src=$1 clang_format=$2
version=$("$clang_format" --version 2>/dev/null | grep -o 'version [0-9]*' | cut -d' ' -f2)
if [[ $version != 14 ]]; then
  echo "check_format: clang-format 14 needed (found '${version:-none}' at '$clang_format'); skipped"
  exit 77
fi
cd "$src" || exit 2
if ! files=$(git ls-files -- '*.cpp' '*.h' '*.cu' '*.cuh' 2>/dev/null) || [[ -z $files ]]; then
  echo "check_format: $src is not a git checkout (the tracked sources are the ones checked); skipped"
  exit 77
fi
bad=0
while IFS= read -r -d '' f; do
  if ! diff -q "$f" <("$clang_format" --style=file "$f") >/dev/null; then
    echo "not formatted: $f (fix: $clang_format -i $f)"
    diff "$f" <("$clang_format" --style=file "$f") | head -8
    bad=1
  fi
done < <(git ls-files -z -- '*.cpp' '*.h' '*.cu' '*.cuh')
exit $bad
