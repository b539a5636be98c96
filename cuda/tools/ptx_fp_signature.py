#!/usr/bin/env python3
"""The floating-point signature of every kernel of some .cu files: the ordered list of PTX
floating-point instructions (add/sub/mul/fma/div/ex2/cvt/setp/min/max/... on f16/bf16/f32/f64) of
each kernel, hashed. A change that leaves every kernel's signature as it was (a rename, a struct of
arguments, a helper that moves loads around) has not changed any kernel's arithmetic; one that
changes a signature needs a GPU re-validation. Kernel names are demangled, template arguments
kept, anonymous namespaces dropped; a renamed kernel keeps its hash.

  python3 cuda/tools/ptx_fp_signature.py [--arch sm_90] [--dump] FILE.cu... > after.txt
  diff <(awk '{print $(NF-1), $NF}' before.txt | sort) <(awk '{print $(NF-1), $NF}' after.txt | sort)

Compiled with the kernel library's flags (-O3 -fmad=false -prec-div=true -prec-sqrt=true).
"""
import argparse
import hashlib
import os
import re
import subprocess
import sys
import tempfile

FP_OP = re.compile(r'^\s*(?:@!?%p\d+\s+)?((?:add|sub|mul|fma|mad|div|rcp|sqrt|rsqrt|ex2|lg2|sin|cos|max|min|abs|neg|'
                   r'cvt|setp|selp|copysign|testp)\.[\w.]*(?:f16|bf16|f32|f64)[\w.]*)')


def kernels(ptx):
    out = {}
    for m in re.finditer(r'\.entry\s+(\S+)\s*\((.*?)\n\}\n', ptx, re.S):
        name = subprocess.run(['c++filt', m.group(1)], capture_output=True, text=True).stdout.strip()
        name = name.replace('(anonymous namespace)::', '').replace('void ', '')
        cut = name.rfind('>(')
        name = name[:cut + 1] if cut >= 0 else name.split('(')[0]
        out[name] = [f.group(1) for line in m.group(2).split('\n') for f in [FP_OP.match(line)] if f]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('files', nargs='+')
    ap.add_argument('--arch', default='sm_90')
    ap.add_argument('--dump', action='store_true', help='print each kernel\'s instruction list too')
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    includes = ['-I' + root] + (['-isystem', '/usr/include/eigen3'] if os.path.isdir('/usr/include/eigen3') else [])
    with tempfile.TemporaryDirectory() as tmp:
        for path in args.files:
            ptx_path = os.path.join(tmp, os.path.basename(path) + '.ptx')
            cmd = ['nvcc', '-O3', '-DNDEBUG', '-std=c++17', f'-arch={args.arch}', '-fmad=false', '-prec-div=true',
                   '-prec-sqrt=true', *includes, '-ptx', path, '-o', ptx_path]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                sys.exit(f'{path}: nvcc failed:\n{done.stderr}')
            for name, ops in sorted(kernels(open(ptx_path).read()).items()):
                digest = hashlib.sha1('\n'.join(ops).encode()).hexdigest()[:12]
                print(f'{name} {len(ops)} {digest}')
                if args.dump:
                    print('\n'.join('  ' + op for op in ops))


if __name__ == '__main__':
    main()
