"""Failure modes the catalogue must recognise, written from what real stacks print (not the corpus),
and healthy output it must leave alone. Each case is a short log; the classifier gives its verdict."""

import pytest

from relaunch.common.diagnosis.classifying import classify
from relaunch.common.diagnosis.scanning import scanner_for
from relaunch.common.diagnosis.signatures import builtin_catalogue

SCANNER = scanner_for(builtin_catalogue())


def verdict(text: str):
    return classify(SCANNER.scan(text.strip("\n").split("\n")))


FAILURES = [
    # (log, signature, fault_domain, action)
    ("[Tue Mar  5 10:00:00 2024] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
     "gpu_xid_hardware", "hardware", "restart_excluding"),
    ("NVRM: Xid (PCI:0000:1b:00): 74, pid=999, name=python, NVLink: fatal error detected on link 3(0x0, 0x0)",
     "gpu_xid_hardware", "hardware", "restart_excluding"),
    ("NVRM: Xid (PCI:0000:3b:00): 95, pid=1234, name=python, Uncontained: FBHUB. RST: Yes, D-RST: No",
     "gpu_xid_hardware", "hardware", "restart_excluding"),
    ("RuntimeError: CUDA error: an illegal memory access was encountered\n"
     "NVRM: Xid (PCI:0000:3b:00): 31, pid=1234, name=python, Ch 00000008, intr 10000000. MMU Fault",
     "cuda_illegal_memory_access", "unknown", "restart"),  # the program's kernel, a library or the driver
    # a template kernel's device assertion names the kernel by its whole signature (CUDA's __PRETTY_FUNCTION__)
    ("/opt/conda/conda-bld/pytorch_1587428091666/work/aten/src/THC/THCTensorIndex.cu:307: void indexSelectSmallIndex"
     "(TensorInfo<T, IndexType>, TensorInfo<T, IndexType>, TensorInfo<long, IndexType>, int, int, IndexType, long) "
     "[with T = c10::Half, IndexType = unsigned int, DstDim = 2, SrcDim = 2, IdxDim = -2]: block: [0,0,0], "
     "thread: [96,0,0] Assertion `srcIndex < srcSelectDimSize` failed.",
     "cuda_device_assert", "application", "stop"),
    ("node3:1234:5678 [2] NCCL WARN NET/IB : Got completion from peer 10.1.1.2<55555> with status=12 opcode=0 "
     "len=0 vendor err 129 (Send) localGid fe80::1 remoteGids fe80::2",
     "nccl_ib_error", "infrastructure", "restart"),  # retry counter exceeded: the path, no adapter named
    ("gpu21:3344:3390 [5] transport/net_ib.cc:98 NCCL WARN NET/IB : mlx5_3:1 Got async event : local catastrophic "
     "error\ngpu21:3344:3401 [5] NCCL WARN NET/IB : Got completion from peer 10.2.0.9<40001> with status=5 opcode=1",
     "nccl_ib_adapter_fatal", "hardware", "restart_excluding"),
    ("mlx5: gpu-a17.cluster: got completion with error:\n00000000 00000000 00000000 00000000",
     "ib_completion_error", "unknown", "restart"),
    ("gpu3:901:955 [0] misc/shmutils.cc:113 NCCL WARN Error while creating shared memory segment "
     "/dev/shm/nccl-Qw3rTy (size 33030528), error: No space left on device (28)\n"
     "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error",
     "nccl_shm_exhausted", "resource", "stop"),
    ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1691, remote process exited or there "
     "was a network error, NCCL version 2.21.5", "nccl_peer_gone", "unknown", "restart"),
    ("(RayTrainWorker pid=3141, ip=10.3.0.12) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
     "ray.exceptions.RayTaskError(ActorDiedError): ray::TrainTrainable.train() (pid=3000, ip=10.3.0.11)\n"
     "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
     "cuda_oom", "application", "stop"),  # the actor's own error explains its death
    ("ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n"
     "\tclass_name: RolloutWorker\n\tpid: 5150\n"
     "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: "
     "Worker unexpectedly exits with a connection error code 2. End of file. Some common causes include: (1) the "
     "process was killed by the OOM killer due to high memory usage", "ray_actor_died", "unknown", "restart"),
    ("(raylet) [2025-01-02 03:04:05,678 E 77 77] node_manager.cc:3069: 3 Workers (tasks / actors) killed due to "
     "memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: 9a8b, IP: 10.9.8.7)",
     "ray_worker_oom", "resource", "stop"),
    ("2025-01-02 03:04:05,678\tWARNING worker.py:2100 -- The node with node id: 9a8b and address: 10.9.8.7 and node "
     "name: 10.9.8.7 has been marked dead because the detector has missed too many heartbeats from it.",
     "ray_node_dead", "infrastructure", "restart"),
    ("ray.exceptions.RaySystemError: System error: Failed to unpickle serialized exception", "ray_system_error",
     "unknown", "restart"),
    ("ray.exceptions.RaySystemError: System error: No module named 'my_rewards'\n"
     "ModuleNotFoundError: No module named 'my_rewards'", "python_library_error", "application", "stop"),
    ("ray.exceptions.RayTaskError(ValueError): ray::Learner.update() (pid=812, ip=10.0.1.4, actor_id=77aa)\n"
     "  File \"learner.py\", line 40, in update\nValueError: expected 2 dims, got 3",
     "ray_task_application_error", "application", "stop"),
    ("[  310.112233] NVRM: GPU3 _kgspIsHeartbeatTimedOut: Heartbeat timed out, currentTimeMs 5 heartbeat 1 diff 5300",
     "gpu_gsp_unresponsive", "hardware", "restart_excluding"),
    ("F1203 08:00:00.000000   77 pjrt_client.cc:300] Non-OK-status: INTERNAL: Core halted unexpectedly: INTERNAL: "
     "Accelerator device halted prematurely, perhaps due to an on-device check-failure.",
     "tpu_core_halted", "unknown", "restart"),
    ("RuntimeError: cuda runtime error (46) : all CUDA-capable devices are busy or unavailable at "
     "/opt/pytorch/aten/src/THC/THCGeneral.cpp:50", "cuda_device_unavailable", "infrastructure", "restart_excluding"),
    ("RuntimeError: CUDA out of memory.\nTried to allocate 1.50 GiB (GPU 0; 10.76 GiB total capacity; 8.12 GiB "
     "already allocated; 1.02 GiB free; 8.50 GiB reserved in total by PyTorch)", "cuda_oom", "application", "stop"),
    ("Tried to allocate 1.50 GiB (GPU 0; 10.76 GiB total capacity; 8.12 GiB already allocated; 1.02 GiB free)",
     "cuda_oom", "application", "stop"),
    ("[rank1]: usage: finetune.py [-h] [--lr LR] [--epochs EPOCHS]\n"
     "[rank1]: finetune.py: error: unrecognized arguments: --local-rank=1\n"
     "E0101 00:00:00.000000 42 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 2) "
     "local_rank: 1 (pid: 43) of binary: /usr/bin/python3", "python_argument_error", "application", "stop"),
    ("2024-02-03 04:05:06.789012: W tensorflow/core/framework/op_kernel.cc:1828] OP_REQUIRES failed at "
     "conv_ops.cc:684 : RESOURCE_EXHAUSTED: OOM when allocating tensor with shape[256,64,112,112] and type float on "
     "/job:localhost/replica:0/task:0/device:CPU:0 by allocator mklcpu", "host_memory_exhausted", "resource", "stop"),
    ("2024-02-03 04:05:06.789012: W tensorflow/core/framework/op_kernel.cc:1828] OP_REQUIRES failed at "
     "conv_ops.cc:684 : RESOURCE_EXHAUSTED: OOM when allocating tensor with shape[256,64,112,112] and type float on "
     "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc", "cuda_oom", "application", "stop"),
    ("jax.errors.JaxRuntimeError: UNKNOWN: <unknown>:0: error: unknown vhlo type code: 40\n"
     "<unknown>:0: note: see current operation: \"builtin.module\"()", "xla_version_mismatch", "application", "stop"),
    ("[123.456] Out of memory: Killed process 1234 (python3) total-vm:123456kB, anon-rss:120000kB",
     "host_oom_kill", "resource", "stop"),
    ("slurmstepd: error: Detected 1 oom_kill event in StepId=5678.0. Some of your processes may have been killed "
     "by the cgroup out-of-memory handler.", "host_oom_kill", "resource", "stop"),
    ("slurmstepd: error: *** JOB 98765 ON gpu-12 CANCELLED AT 2024-03-01T12:00:00 DUE TO TIME LIMIT ***",
     "slurm_time_limit", "scheduler", "restart"),
    ("slurmstepd: error: *** JOB 98765 ON gpu-12 CANCELLED AT 2024-03-01T12:00:00 DUE TO PREEMPTION ***",
     "slurm_preempted", "scheduler", "restart"),
    ("[rank3]: RuntimeError: NCCL communicator was aborted\n"
     "slurmstepd: error: *** JOB 98765 ON gpu-12 CANCELLED AT 2024-03-01T12:00:00 DUE TO NODE FAILURE, SEE "
     "SLURMCTLD LOG FOR DETAILS ***", "slurm_node_failure", "infrastructure", "restart"),
    ("slurmstepd: error: *** JOB 98765 ON gpu-12 CANCELLED AT 2024-03-01T12:00:00 ***",
     "slurm_cancelled", "scheduler", "stop"),
    ("ImportError: /usr/lib/python3/dist-packages/flash_attn_2_cuda.so: undefined symbol: _ZN3c104cuda9SetDeviceEi",
     "python_import_failed", "application", "stop"),
    ('  File "train.py", line 10\n    print "x"\n    ^\nSyntaxError: Missing parentheses in call to \'print\'',
     "python_application_error", "application", "stop"),
    ("RuntimeError: The size of tensor a (4) must match the size of tensor b (8) at non-singleton dimension 1",
     "tensor_shape_error", "application", "stop"),
    (" iteration      900/  500000 | lm loss: nan | loss scale: 1.0 | number of nan iterations:   1 |",
     "nan_loss_printed", "application", "stop"),
    ("[2024-01-01 00:00:00,000] [INFO] [loss_scaler.py:190:update_scale] Current loss scale already at minimum - "
     "cannot decrease scale anymore. Exiting run.", "nan_loss", "application", "stop"),
    ("RuntimeError: Function 'LogSoftmaxBackward0' returned nan values in its 0th output.",
     "nan_loss", "application", "stop"),
    ("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -11) local_rank: 0 (pid: 5432) of "
     "binary: /usr/bin/python", "segfault", "unknown", "restart"),
    ("OSError: [Errno 122] Disk quota exceeded: '/home/u/ckpt'", "fs_no_space", "resource", "stop"),
    ("OSError: [Errno 121] Remote I/O error", "fs_io_error", "infrastructure", "restart"),
    ("torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError", "rendezvous_store_error",
     "infrastructure", "restart"),
    ("RuntimeError: Timed out initializing process group in store based barrier on rank: 0, for key: "
     "store_based_barrier_key:1 (world_size=16, worker_count=8, timeout=0:30:00)",
     "rendezvous_store_error", "infrastructure", "restart"),
    ("RuntimeError: CUDA error: uncorrectable NVLink error detected during the execution",
     "gpu_nvlink_error", "hardware", "restart_excluding"),
    ("srun: error: node5: task 3: Exited with exit code 93", "nvrx_do_not_restart", "application", "stop"),
    ("mpirun noticed that process rank 7 with PID 0 on node gpu7 exited on signal 9 (Killed).",
     "process_killed_signal", "unknown", "restart"),
    ("nvidia-container-cli: initialization error: nvml error: driver not loaded",
     "gpu_driver_unavailable", "infrastructure", "restart_excluding"),
    ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error (run with "
     "NCCL_DEBUG=INFO for details), NCCL version 2.19.3\nncclUnhandledCudaError: Call to CUDA function failed.\n"
     "Last error:\nCuda failure 'out of memory'", "cuda_oom", "application", "stop"),
    ("Last error:\nCuda failure 'invalid device function'", "cuda_error", "unknown", "restart"),
    ("RuntimeError: Too many open files. Communication with the workers is no longer possible.",
     "shm_exhausted", "resource", "stop"),
    ("[rank1]:[E ProcessGroupNCCL.cpp:1414] [PG 0 Rank 1] Process group watchdog thread terminated with exception: "
     "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE) ran for 600000 "
     "milliseconds before timing out.\nterminate called after throwing an instance of 'c10::DistBackendError'\n"
     "Fatal Python error: Aborted\nERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -6)",
     "nccl_collective_timeout", "unknown", "restart"),
    ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n  exitcode  : 1 (pid: 1234)",
     "teardown_launcher", "unknown", "restart"),
    # exit code 2 is Python's usage error (argparse): the launcher's summary says more than its teardown
    ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \nRoot Cause (first observed failure):\n"
     "  rank      : 1 (local_rank: 1)\n  exitcode  : 2 (pid: 37881)", "launcher_usage_exit", "application", "stop"),
    # ... but a rank's own error is the cause
    ("[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
     "  exitcode  : 2 (pid: 37881)", "cuda_illegal_memory_access", "unknown", "restart"),
    # a socket that failed names no culprit: the peer may be gone
    ("node1:123:456 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.0.2<45555> failed : "
     "Software caused connection abort", "nccl_system_error", "unknown", "restart"),
    # NCCL before 2.4: a bare "WARN" behind the source location
    ("gpu-07:18553:18611 [0] include/socket.h:360 WARN Call to connect failed : Connection timed out\n"
     "gpu-07:18553:18612 [0] include/socket.h:344 WARN Socket creation failed : Address family not supported by protocol",
     "nccl_system_error", "unknown", "restart"),
    ("node1:123:456 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.0.2<45555> failed : "
     "No route to host", "nccl_network_unreachable", "infrastructure", "restart"),
    # PBS/Moab's mail: preempted *by a node failure* is a node failure, not a preemption
    ("PBS Job Id: 2598356.fe1.local\nExec host:  gpu-2-17/11\njob preempted (node failure)",
     "slurm_node_failure", "infrastructure", "restart"),
    ("[2025-07-04T00:54:23.932] update_node: node gpu-dy-7 reason set to: Scheduler health check failed",
     "slurmctld_node_reason", "infrastructure", "restart"),
    # a SPANK plugin slurmd cannot initialise on the node fails the task's launch
    ("srun: error: task 0 launch failed: Plugin initialization failed\n"
     "[2024-03-01T08:00:00.100] [77.0] error: spank: required plugin spank_pyxis.so: init_post_opt() failed with rc=-1",
     "slurm_prolog_error", "infrastructure", "restart"),
    # PyTorch/XLA's XRT: a torn-down session is what the other devices see; a rank's own error explains more
    # XRT's own session set-up on the TPU worker (configure_distributed_tpu), logged through tf_logging.cc
    ("E    2858 tensorflow/compiler/xla/xla_client/tf_logging.cc:11] Check failed: session.Run({tensorflow::Output("
     "result, 0)}, &outputs) == ::tensorflow::Status::OK() (Internal: From /job:tpu_worker/replica:0/task:0:\n"
     "Global core array does not contain host cores [0x0x0_TC0]", "xla_xrt_call_failed", "unknown", "restart"),
    ("Exception in device=TPU:1: tensorflow/compiler/xla/xla_client/xrt_computation_client.cc:415 : Check failed: "
     "session->session()->Run(session_work->feed_inputs, session_work->outputs_handles, &outputs) == "
     "::tensorflow::Status::OK() (Cancelled: From /job:tpu_worker/replica:0/task:0:", "xla_xrt_call_failed", "unknown",
     "restart"),
    ("Exception in device=TPU:1: tensorflow/compiler/xla/xla_client/xrt_computation_client.cc:415 : Check failed: "
     "session->session()->Run() == ::tensorflow::Status::OK() (Cancelled: Cancelled by TearDown. vs. OK)\n"
     "ValueError: Expected input batch_size (8) to match target batch_size (4).", "tensor_shape_error", "application",
     "stop"),
    ("Exception: expected value at line 1 column 1\n"
     "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 (pid: 24024)",
     "input_json_parse_error", "application", "stop"),
    # Slurm could not reach a node's slurmd, create the step in its allocation, or run the step's command
    ("srun: error: slurm_receive_msgs: [[gpu-7.cluster]:6818] failed: Socket timed out on send/recv operation\n"
     "srun: error: Application launch failed: Socket timed out on send/recv operation\nsrun: Job step aborted",
     "slurm_rpc_failed", "infrastructure", "restart"),
    ("srun: Job 77 step creation temporarily disabled, retrying (Requested nodes are busy)\n"
     "srun: error: Unable to create step for job 77: Requested node configuration is not available",
     "slurm_step_create_failed", "scheduler", "restart"),
    ("slurmstepd: error: execve(): accelerate: No such file or directory\nsrun: error: gpu-3: task 0: Exited with exit code 2",
     "slurm_exec_failed", "infrastructure", "stop"),
    # submitit names the signal Slurm sent: a preemption or the time limit, then it requeues the job
    ("submitit WARNING (2024-03-01 10:00:00,000) - Caught signal SIGUSR2 on gpu-3: this job is preempted.\n"
     "srun: error: gpu-3: tasks 0-3: Exited with exit code 1", "slurm_preempted", "scheduler", "restart"),
    ("submitit WARNING (2024-03-01 10:00:00,000) - Caught signal SIGUSR2 on gpu-3: this job is timed-out.",
     "slurm_time_limit", "scheduler", "restart"),
    # the raylet's own words when the GCS declared its node dead
    ("[2024-03-01 10:00:00,000 C 88 88] node_manager.cc:1020: [Timeout] Exiting because this node manager has "
     "mistakenly been marked as dead by the GCS: GCS failed to check the health of this node for 5 times.",
     "ray_node_dead", "infrastructure", "restart"),
    # THC's (torch7, early PyTorch) words for CUDA errors
    ("RuntimeError: cuda runtime error (30) : unknown error at /pytorch/aten/src/THC/THCGeneral.cpp:70",
     "cuda_unknown_error", "infrastructure", "restart"),
    ("RuntimeError: cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/generic/THCStorage.cu:58",
     "cuda_oom", "application", "stop"),
]

HEALTHY = [
    # Slurm's accounting saw the step touch its memory limit once (page cache counts): a warning, the job went on
    """epoch 3/3 done, checkpoint saved to /scratch/ckpt/final.pt
slurmstepd: error: Exceeded job memory limit at some point.
slurmstepd: error: Exceeded step memory limit at some point.""",
    """gpu-st-1:12345:12345 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.5<0>
gpu-st-1:12345:12345 [0] NCCL INFO NET/Plugin: Failed to find ncclNetPlugin_v8 symbol.
gpu-st-1:12345:12366 [0] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)
gpu-st-1:12345:12366 [0] NCCL INFO NET/IB : No device found.
gpu-st-1:12345:12366 [0] NCCL INFO NCCL_IB_TIMEOUT set by environment to 22.
gpu-st-1:12345:12366 [0] NCCL INFO Connected all rings
gpu-st-1:12345:12380 [0] NCCL INFO [Service thread] Connection closed by localRank 0
gpu-st-1:12345:12345 [0] NCCL INFO comm 0x55d5c5c0 rank 0 nranks 16 cudaDev 0 busId 101c0 - Destroy COMPLETE""",
    """W0611 10:00:00.000000 140 torch/distributed/run.py:779] Setting OMP_NUM_THREADS environment variable for each process
[W socket.cpp:464] [c10d] The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).
[rank0]:[W1206 18:44:12.715298746 ProcessGroupNCCL.cpp:4115] Warning: process group has NOT been destroyed""",
    """{'loss': 1.2345, 'grad_norm': 0.8, 'learning_rate': 2e-05, 'epoch': 0.1}
{'eval_loss': 1.1, 'eval_runtime': 12.3, 'eval_samples_per_second': 80.1, 'epoch': 0.1}
Saving model checkpoint to ./out/checkpoint-100
{'train_runtime': 600.1, 'train_samples_per_second': 26.6, 'train_loss': 1.05, 'epoch': 1.0}""",
    """GPU available: True (cuda), used: True
LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES: [0,1,2,3,4,5,6,7]
Epoch 0: 100%|██████████| 500/500 [02:00<00:00, 4.15it/s, v_num=3, train_loss=0.412]
`Trainer.fit` stopped: `max_epochs=10` reached.""",
    """[2024-01-01 00:00:20,000] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768
[2024-01-01 00:00:30,000] [INFO] [logging.py:96:log_dist] [Rank 0] step=100, skipped=3, lr=[0.0001], mom=[(0.9, 0.95)]
[2024-01-01 00:00:30,000] [WARNING] [stage3.py:1991:step] 2 pytorch allocator cache flushes since last step. this happens when there is high memory pressure
[2024-01-01 01:00:00,000] [INFO] [launch.py:347:main] Process 1234 exits successfully.""",
    """[rank0]:2024-06-01 12:00:00,000 - root - INFO - step:  1  loss: 12.2341  memory: 40.12GiB(50.67%)  tps: 1,234  mfu: 5.12%
[rank0]:2024-06-01 12:00:00,000 - root - WARNING - 20 CUDA memory allocation retries.""",
    """ iteration      100/  500000 | consumed samples:        51200 | lm loss: 6.543210E+00 | loss scale: 131072.0 | grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |
saving checkpoint at iteration     200 to /ckpt
[Rank 0] (after 100 iterations) memory (MB) | allocated: 1234.5 | max allocated: 2345.6""",
    """| GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |
|   0  NVIDIA H100 80GB HBM3          On  | 00000000:19:00.0 Off |                    0 |
srun: job 123456 queued and waiting for resources
srun: job 123456 has been allocated resources""",
    """/usr/local/lib/python3.10/dist-packages/torch/utils/checkpoint.py:464: UserWarning: torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly.
  warnings.warn(
wandb: ERROR Error while calling W&B API: context deadline exceeded (<Response [500]>)
NVRM: Xid (PCI:0000:3b:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row marked for remapping, reset gpu to activate.""",
    """node4:3111:3111 [0] misc/ibvwrap.cc:190 NCCL WARN Call to ibv_open_device failed
node4:3111:3111 [0] transport/net_ib.cc:160 NCCL WARN NET/IB : Unable to open device mlx5_3
node4:3111:3111 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.1.0.4<0>
node4:3111:3111 [0] NCCL INFO Using network IB
slurmstepd-node4: error: couldn't chdir to `/home/u/run3': No such file or directory: going to /tmp instead""",
]


@pytest.mark.parametrize("log, signature, domain, action", FAILURES,
                         ids=[f"{f[1]}{i}" for i, f in enumerate(FAILURES)])
def test_failure_modes_are_recognised(log, signature, domain, action):
    found = verdict(log)
    assert found is not None, "no signature recognised the failure"
    assert (found.signature_id, found.fault_domain, found.action) == (signature, domain, action)


@pytest.mark.parametrize("log", HEALTHY, ids=[f"healthy{i}" for i in range(len(HEALTHY))])
def test_healthy_output_is_left_alone(log):
    found = verdict(log)
    assert found is None, f"{found.signature_id}: {found.evidence[0].text}"


def test_every_builtin_example_is_classified_by_its_own_signature():
    """Catches a signature shadowed by an earlier, broader one (a line gets the first that matches)."""
    for sig in builtin_catalogue().signatures:
        for example in sig.examples:
            found = SCANNER.match_line(example, 0)
            if sig.role == "advice":
                assert found is None, f"{sig.id}: {example!r}"
            else:
                assert found is not None, f"{sig.id}: nothing matched {example!r}"
                assert found.signature.id == sig.id or "xid" in sig.pattern.groupindex, (
                    f"{sig.id}: {example!r} went to {found.signature.id}")


def test_an_infiniband_adapters_fatal_event_names_the_host_that_printed_it_behind_mpiruns_tag():
    found = verdict("2026-01-02T03:04:05.678Z: [1,7]<stderr>:gpu-n12:5150:5201 [0] transport/net_ib.cc:101 NCCL WARN "
                    "NET/IB : Got async event : local catastrophic error")
    assert (found.signature_id, found.action, found.nodes) == ("nccl_ib_adapter_fatal", "restart_excluding", ("gpu-n12",))


def test_rays_guess_at_a_dead_workers_cause_is_not_an_oom_kill_but_its_memory_monitor_is():
    guess = ("The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit "
             "detail: Worker unexpectedly exits with a connection error code 2. End of file. There are some potential "
             "root causes. (1) The process is killed by SIGKILL by OOM killer due to high memory usage.")
    assert verdict(guess).signature_id == "ray_actor_died"
    assert verdict("(raylet) 0 Workers (tasks / actors) killed due to memory pressure (OOM), 1 Workers crashed due "
                   "to other reasons at node (ID: 1f, IP: 10.0.0.2)") is None
    killed = verdict(guess.replace("SYSTEM_ERROR", "NODE_OUT_OF_MEMORY"))
    assert (killed.signature_id, killed.fault_domain, killed.action) == ("ray_worker_oom", "resource", "stop")
