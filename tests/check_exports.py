#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# ibpshim: libibpshim.so exports the hooks and the documented API and nothing else.
import re
import subprocess
import sys

ALLOWED = re.compile(r"^(cuda[A-Za-z0-9_]+|cuMemcpy[A-Za-z0-9_]*|cuMemset[A-Za-z0-9_]+|cuStreamWriteValue(32|64)(_v2)?(_ptsz)?|"
                     r"cuStreamBatchMemOp(_v2)?(_ptsz)?|cuLaunchHostFunc(_ptsz)?|cuStreamAddCallback(_ptsz)?|"
                     r"cuGraphInstantiate(_v2|WithFlags|WithParams|WithParams_ptsz)?|cuGraphExecUpdate(_v2)?|cuGraphExecDestroy|"
                     r"cuGraphExec(Memcpy|Memset|ChildGraph|BatchMemOp)?NodeSetParams|cuGraphExecKernelNodeSetParams(_v2)?|"
                     r"cuGraphLaunch(_ptsz)?|cuLaunch(Cooperative)?Kernel(_ptsz)?|cuModuleUnload|cuLibraryUnload|__cudaUnregisterFatBinary|cuLaunchKernelEx(_ptsz)?|cuDevicePrimaryCtxReset(_v2)?|cuCtxDestroy(_v2)?|cuGreenCtxDestroy|cuGetProcAddress(_v2)?|ibpshim_[a-z0-9_]+|sigaction|signal|read|__read_chk|pread|pread64|"
                     r"__pread_chk|__pread64_chk|readv|preadv|preadv64|preadv2|recv|__recv_chk|recvfrom|"
                     r"__recvfrom_chk|recvmsg|recvmmsg)$")
REQUIRED = ["cudaMallocHost", "cudaHostAlloc", "cudaFreeHost", "cudaHostRegister", "cudaHostUnregister",
            "cudaMemcpy", "cudaMemcpy_ptds", "cudaMemcpyAsync", "cudaMemcpyAsync_ptsz", "cudaLaunchHostFunc",
            "cudaLaunchHostFunc_ptsz", "cudaStreamAddCallback", "cudaStreamAddCallback_ptsz",
            "cudaGraphInstantiate", "cudaGraphInstantiateWithFlags", "cudaGraphInstantiateWithParams",
            "cudaGraphInstantiateWithParams_ptsz", "cudaGraphExecUpdate", "cudaGraphExecDestroy",
            "cudaGraphLaunch", "cudaGraphLaunch_ptsz", "cudaMemcpy2D", "cudaMemcpy2DAsync",
            "cudaMemcpy2DAsync_ptsz", "cudaMemcpy3D", "cudaMemcpy3DAsync", "cudaMemcpyFromSymbolAsync",
            "cudaMemcpyBatchAsync", "cudaMemcpy3DBatchAsync", "cudaMemset", "cudaMemsetAsync",
            "cudaMemsetAsync_ptsz", "cudaMemset2DAsync", "cudaMemset3DAsync", "ibpshim_version",
            "read", "sigaction", "signal", "recvmsg", "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoHAsync_v2_ptsz",
            "cuMemcpyAsync", "cuMemsetD8Async", "cuMemcpy3D_v2", "cuStreamWriteValue32_v2", "cuStreamWriteValue32",
            "cuStreamBatchMemOp", "cuGetProcAddress_v2",
            "cuLaunchHostFunc", "cuLaunchHostFunc_ptsz", "cuStreamAddCallback", "cuStreamAddCallback_ptsz",
            "cuGraphInstantiateWithFlags", "cuGraphLaunch", "cuGraphLaunch_ptsz", "cuGraphExecDestroy",
            "cuGraphExecUpdate_v2", "cuGraphExecMemcpyNodeSetParams", "cuGraphExecMemsetNodeSetParams",
            "cuGraphInstantiateWithParams", "cuGraphInstantiateWithParams_ptsz", "cuGraphInstantiate",
            "cuGraphInstantiate_v2", "cuGraphExecUpdate", "cuGraphExecChildGraphNodeSetParams",
            "cuGraphExecNodeSetParams", "cuGraphExecBatchMemOpNodeSetParams", "cudaGraphExecChildGraphNodeSetParams", "cudaGraphExecNodeSetParams",
            "cuMemcpyBatchAsync", "cuMemcpyBatchAsync_ptsz", "cuMemcpyBatchAsync_v2", "cuMemcpyBatchAsync_v2_ptsz",
            "cuMemcpy3DBatchAsync", "cuMemcpy3DBatchAsync_ptsz", "cuMemcpy3DBatchAsync_v2",
            "cuMemcpy3DBatchAsync_v2_ptsz", "cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx",
            "cuLaunchKernelEx_ptsz", "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz",
            "cudaLaunchKernel", "cudaLaunchKernel_ptsz", "cudaLaunchKernelExC", "cudaLaunchKernelExC_ptsz",
            "cudaLaunchCooperativeKernel", "cudaLaunchCooperativeKernel_ptsz", "cuGraphExecKernelNodeSetParams",
            "cuGraphExecKernelNodeSetParams_v2", "cudaGraphExecKernelNodeSetParams",
            "cuModuleUnload", "cuLibraryUnload", "cudaLibraryUnload", "__cudaUnregisterFatBinary",
            "cudaDeviceReset", "cudaThreadExit", "cuDevicePrimaryCtxReset", "cuDevicePrimaryCtxReset_v2",
            "cuCtxDestroy", "cuCtxDestroy_v2", "cuGreenCtxDestroy"]


def main(path):
    out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True, check=True).stdout
    names = [line.split()[-1] for line in out.splitlines() if line.strip()]
    bad = [n for n in names if not ALLOWED.match(n)]
    missing = [n for n in REQUIRED if n not in names]
    for n in bad:
        print("unexpected export: %s" % n)
    for n in missing:
        print("missing export: %s" % n)
    print("%d exported symbols checked" % len(names))
    return 1 if bad or missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
