"""Why a node that looks removable stays: a message for people, a code for counting.

Pure module, no side effects. Codes follow cluster-autoscaler's UnremovableReason and
BlockingPodReason names where CA has one, so dashboards and habits built on CA carry
over; the rest are ours and named in the same style.
"""

from __future__ import annotations

# cluster-autoscaler's names
SCALE_DOWN_DISABLED_ANNOTATION = "ScaleDownDisabledAnnotation"
NOT_UNNEEDED_LONG_ENOUGH = "NotUnneededLongEnough"
NOT_UNREADY_LONG_ENOUGH = "NotUnreadyLongEnough"
NODE_GROUP_MIN_SIZE_REACHED = "NodeGroupMinSizeReached"
MINIMAL_RESOURCE_LIMIT_EXCEEDED = "MinimalResourceLimitExceeded"
NO_PLACE_TO_MOVE_PODS = "NoPlaceToMovePods"
NOT_SAFE_TO_EVICT = "NotSafeToEvictAnnotation"
LOCAL_STORAGE = "LocalStorageRequested"
NOT_REPLICATED = "NotReplicated"
UNMOVABLE_KUBE_SYSTEM_POD = "UnmovableKubeSystemPod"
NOT_ENOUGH_PDB = "NotEnoughPdb"
# ours
DO_NOT_DISRUPT = "DoNotDisruptAnnotation"
CORDONED_BY_OTHERS = "CordonedByOthers"
MEASURED_CPU_HIGH = "MeasuredCpuHigh"
PENDING_PODS_COULD_USE = "PendingPodsCouldUse"
RECEIVES_MOVED_PODS = "ReceivesMovedPods"
SCALE_DOWN_COOLDOWN = "ScaleDownCooldown"
MAX_PARALLELISM_REACHED = "MaxParallelismReached"
ARM_THROTTLED = "ArmThrottled"
# A disruption budget (engine.disruption_budgets) allows no more disruptions of the node's reason now. Ours.
DISRUPTION_BUDGET = "DisruptionBudget"
# Outside this poll's candidate pool (scale_down._pool): never removed on an older verdict. Ours: CA drops such a
# node from its unneeded list.
NOT_SIMULATED = "NotSimulatedThisTick"


class KeptReason(str):
    """The message itself (so it logs and compares as text), with `code` for counting and metrics."""

    code: str

    def __new__(cls, code: str, message: str) -> KeptReason:
        reason = super().__new__(cls, message)
        reason.code = code
        return reason

    def __reduce__(self) -> tuple[type[KeptReason], tuple[str, str]]:
        return (KeptReason, (self.code, str(self)))
