"""Cartesian velocity control of the arm, as in RGB-stacking: (vx, vy, vz, yaw rate, gripper).

Each control step integrates the commanded velocity into a target pose for the tool-centre point
(kept inside the workspace box, pointing down), then one damped-least-squares step of
differential inverse kinematics, with a posture term in the Jacobian's null space, turns the pose
error into joint position targets for the arm's position actuators.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import mujoco
import numpy as np

from gameon.envs.world import (
    CONTROL_DT,
    FINGER_OPEN,
    HOME_QPOS,
    WORKSPACE_HIGH,
    WORKSPACE_LOW,
    World,
)

MAX_SPEED = 0.3
"""Tool-centre-point speed at |action| = 1, m/s per axis."""
MAX_YAW_RATE = 2.0
"""Yaw rate at |action| = 1, rad/s."""
YAW_LIMIT = np.pi / 2
"""The hand's yaw (0 at home: fingers close along world y) stays within +-this, rad."""
LEASH = 0.05
"""The target never runs further than this ahead of the real tool-centre point, m."""
DAMPING = 0.05
"""Damped-least-squares damping (lambda): keeps joint steps bounded near singularities."""
POSTURE_GAIN = 0.2
_LOW_X, _LOW_Y, _LOW_Z = WORKSPACE_LOW.tolist()
_HIGH_X, _HIGH_Y, _HIGH_Z = WORKSPACE_HIGH.tolist()
_TARGET_STEP = MAX_SPEED * CONTROL_DT
"""Target travel per control step at |action| = 1, m."""


def downward_rotation(yaw: float) -> np.ndarray:
    """Rotation of a hand pointing straight down whose x axis has the given world yaw."""
    c, s = np.cos(yaw), np.sin(yaw)
    return np.array([[c, s, 0.0], [s, -c, 0.0], [0.0, 0.0, -1.0]])


def pose_error(world: World, target_pos: np.ndarray, target_yaw: float) -> np.ndarray:
    """6-D error (position, then rotation vector) from the TCP's pose to a downward target pose."""
    data = world.data
    dx, dy, dz = (target_pos - data.site_xpos[world.tcp_site]).tolist()
    rotation = _rotation_error(data.site_xmat[world.tcp_site].tolist(), target_yaw)
    return np.array([dx, dy, dz, *rotation])


def _rotation_error(r: list[float], target_yaw: float) -> tuple[float, float, float]:
    """vee(G R^T - R G^T) / 2 for G = downward_rotation(target_yaw) and the TCP's rotation R.

    Written out in scalars because it runs every control step.
    """
    c, s = math.cos(target_yaw), math.sin(target_yaw)
    return (
        0.5 * (-r[5] - s * r[6] + c * r[7]),
        0.5 * (c * r[6] + s * r[7] + r[2]),
        0.5 * (s * r[0] - c * r[1] - c * r[3] - s * r[4]),
    )


def _track(target: float, speed: float, tcp: float, low: float, high: float) -> float:
    """One coordinate of the next target: moved at `speed`, on a LEASH to the TCP, in bounds.

    min(max(target + speed * step, tcp - LEASH, low), tcp + LEASH, high), in comparisons that
    pick the same value as those builtins (a third of their cost: this runs every step).
    """
    value = target + speed * _TARGET_STEP
    floor, ceiling = tcp - LEASH, tcp + LEASH
    if floor > value:
        value = floor
    if low > value:
        value = low
    if ceiling < value:
        value = ceiling
    if high < value:
        value = high
    return value


class _Workspace(NamedTuple):
    """The controller's preallocated arrays, unpacked at once each step."""

    jac: np.ndarray
    """The arm's 6x7 columns of the TCP Jacobian (a view of the full one)."""
    jac_t: np.ndarray
    gram: np.ndarray
    """J J^T + damping, then its Cholesky factor."""
    task: np.ndarray
    """error - J posture."""
    step: np.ndarray
    """gram^-1 task."""
    posture: np.ndarray
    joints: np.ndarray


class CartesianController:
    """Turns normalised actions in [-1, 1]^5 into actuator targets for one World."""

    def __init__(self, world: World) -> None:
        self.world = world
        model = world.model
        self._model, self._data, self._tcp_site = model, world.data, world.tcp_site
        jac = np.zeros((6, model.nv))
        self._jacp, self._jacr = jac[:3], jac[3:]
        arm_jac = jac[:, :7]
        self._work = _Workspace(
            jac=arm_jac,
            jac_t=arm_jac.T,
            gram=np.zeros((6, 6)),
            task=np.zeros(6),
            step=np.zeros(6),
            posture=np.zeros(7),
            joints=np.zeros(7),
        )
        self._damping = DAMPING**2 * np.eye(6)
        self._error = np.zeros(6)
        self._q = world.data.qpos[world.arm_qpos]
        self._tcp_xpos = world.data.site_xpos[world.tcp_site]
        self._tcp_xmat = world.data.site_xmat[world.tcp_site]
        self._arm_ctrl = world.data.ctrl[:7]
        self._finger_ctrl = world.data.ctrl[7:9]
        self._qlow = model.jnt_range[:7, 0]
        self._qhigh = model.jnt_range[:7, 1]
        self.target_pos = (0.0, 0.0, 0.0)
        """Where the tool-centre point is being driven, m (floats, read every step)."""
        self.target_yaw = 0.0

    def __reduce__(self) -> tuple:
        """Copies and pickles rebuild the views of the (copied) world's simulator arrays."""
        return _controller_of, (self.world, self.target_pos, self.target_yaw)

    def reset(self) -> None:
        """Hold the current pose: call after the simulator state was set."""
        world = self.world
        self.target_pos = tuple(world.tcp_pos().tolist())
        self.target_yaw = self.hand_yaw()
        world.data.ctrl[:7] = world.data.qpos[world.arm_qpos]
        world.data.ctrl[7:9] = world.data.qpos[world.finger_qpos]

    def hand_yaw(self) -> float:
        xmat = self.world.data.site_xmat[self.world.tcp_site]
        return float(np.arctan2(xmat[3], xmat[0]))

    def apply(self, action: Sequence[float]) -> None:
        """Set actuator targets for one control step from an action already clipped to [-1, 1].

        Works in preallocated arrays, passing ufuncs their output positionally (the cheapest
        call); each arithmetic step is the one numpy would do on fresh arrays, so the targets are
        bit for bit those of the plain formulas in the comments.
        """
        vx, vy, vz, yaw_rate, grip = action
        x, y, z = self.target_pos
        tcp_x, tcp_y, tcp_z = self._tcp_xpos.tolist()
        x = _track(x, vx, tcp_x, _LOW_X, _HIGH_X)
        y = _track(y, vy, tcp_y, _LOW_Y, _HIGH_Y)
        z = _track(z, vz, tcp_z, _LOW_Z, _HIGH_Z)
        self.target_pos = (x, y, z)
        yaw = self.target_yaw + yaw_rate * (MAX_YAW_RATE * CONTROL_DT)
        if yaw < -YAW_LIMIT:
            yaw = -YAW_LIMIT
        elif yaw > YAW_LIMIT:
            yaw = YAW_LIMIT
        self.target_yaw = yaw
        error = self._error
        error[:] = (x - tcp_x, y - tcp_y, z - tcp_z, *_rotation_error(self._tcp_xmat.tolist(), yaw))

        jac, jac_t, gram, task, step, posture, joints = self._work
        mujoco.mj_jacSite(self._model, self._data, self._jacp, self._jacr, self._tcp_site)
        q = self._q
        # posture = POSTURE_GAIN * (HOME_QPOS - q)
        np.multiply(POSTURE_GAIN, np.subtract(HOME_QPOS, q, posture), posture)
        # Null-space posture: dq = posture + J+ (error - J posture), with J+ the damped inverse.
        np.add(np.matmul(jac, jac_t, gram), self._damping, gram)
        mujoco.mju_cholFactor(gram, 0.0)
        np.subtract(error, np.matmul(jac, posture, task), task)
        mujoco.mju_cholSolve(step, gram, task)
        # ctrl = clip(q + (posture + J^T step), qlow, qhigh)
        np.add(q, np.add(posture, np.matmul(jac_t, step, joints), joints), joints)
        np.minimum(np.maximum(joints, self._qlow, out=joints), self._qhigh, out=self._arm_ctrl)
        self._finger_ctrl.fill(FINGER_OPEN * (1.0 - grip) / 2)


def _controller_of(
    world: World, target_pos: tuple[float, float, float], target_yaw: float
) -> CartesianController:
    """A controller of `world` driving toward this target (how a copied controller is rebuilt)."""
    controller = CartesianController(world)
    controller.target_pos, controller.target_yaw = target_pos, target_yaw
    return controller


def move_arm_to(world: World, tcp_pos: np.ndarray, yaw: float, iterations: int = 60) -> None:
    """Set the arm's joints kinematically so the TCP sits at a pose, pointing down."""
    model, data = world.model, world.data
    jac = np.zeros((6, model.nv))
    data.qpos[world.arm_qpos] = HOME_QPOS
    for _ in range(iterations):
        mujoco.mj_kinematics(model, data)
        mujoco.mj_comPos(model, data)
        error = pose_error(world, tcp_pos, yaw)
        if np.abs(error).max() < 1e-5:
            break
        mujoco.mj_jacSite(model, data, jac[:3], jac[3:], world.tcp_site)
        arm = jac[:, :7]
        q = data.qpos[world.arm_qpos]
        step = np.linalg.solve(arm @ arm.T + DAMPING**2 * np.eye(6), error)
        data.qpos[world.arm_qpos] = np.clip(
            q + arm.T @ step, model.jnt_range[:7, 0], model.jnt_range[:7, 1]
        )
