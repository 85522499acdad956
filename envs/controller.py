"""Cartesian velocity control of the arm, as in RGB-stacking: (vx, vy, vz, yaw rate, gripper).

Each control step integrates the commanded velocity into a target pose for the tool-centre point
(kept inside the workspace box, pointing down), then one damped-least-squares step of
differential inverse kinematics, with a posture term in the Jacobian's null space, turns the pose
error into joint position targets for the arm's position actuators.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

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
_WORKSPACE_LOW = WORKSPACE_LOW.tolist()
_WORKSPACE_HIGH = WORKSPACE_HIGH.tolist()


def downward_rotation(yaw: float) -> np.ndarray:
    """Rotation of a hand pointing straight down whose x axis has the given world yaw."""
    c, s = np.cos(yaw), np.sin(yaw)
    return np.array([[c, s, 0.0], [s, -c, 0.0], [0.0, 0.0, -1.0]])


def pose_error(world: World, target_pos: np.ndarray, target_yaw: float) -> np.ndarray:
    """6-D error (position, then rotation vector) from the TCP's pose to a downward target pose.

    The rotation part is vee(G R^T - R G^T) / 2 for G = downward_rotation(target_yaw), written
    out in scalars because this runs every control step.
    """
    data = world.data
    r = data.site_xmat[world.tcp_site].tolist()
    c, s = math.cos(target_yaw), math.sin(target_yaw)
    dx, dy, dz = (target_pos - data.site_xpos[world.tcp_site]).tolist()
    return np.array(
        [
            dx,
            dy,
            dz,
            0.5 * (-r[5] - s * r[6] + c * r[7]),
            0.5 * (c * r[6] + s * r[7] + r[2]),
            0.5 * (s * r[0] - c * r[1] - c * r[3] - s * r[4]),
        ]
    )


class CartesianController:
    """Turns normalised actions in [-1, 1]^5 into actuator targets for one World."""

    def __init__(self, world: World) -> None:
        self.world = world
        model = world.model
        self._jac = np.zeros((6, model.nv))
        self._jacp, self._jacr, self._arm_jac = self._jac[:3], self._jac[3:], self._jac[:, :7]
        self._damping = DAMPING**2 * np.eye(6)
        self._step = np.zeros(6)
        self._qlow = model.jnt_range[:7, 0]
        self._qhigh = model.jnt_range[:7, 1]
        self.target_pos = np.zeros(3)
        self.target_yaw = 0.0

    def reset(self) -> None:
        """Hold the current pose: call after the simulator state was set."""
        world = self.world
        self.target_pos = world.tcp_pos().copy()
        self.target_yaw = self.hand_yaw()
        world.data.ctrl[:7] = world.data.qpos[world.arm_qpos]
        world.data.ctrl[7:9] = world.data.qpos[world.finger_qpos]

    def hand_yaw(self) -> float:
        xmat = self.world.data.site_xmat[self.world.tcp_site]
        return float(np.arctan2(xmat[3], xmat[0]))

    def apply(self, action: Sequence[float]) -> None:
        """Set actuator targets for one control step from an action already clipped to [-1, 1]."""
        world = self.world
        data = world.data
        vx, vy, vz, yaw_rate, grip = action
        step = MAX_SPEED * CONTROL_DT
        self.target_pos = np.array(
            [
                min(max(target + v * step, real - LEASH, low), real + LEASH, high)
                for target, v, real, low, high in zip(
                    self.target_pos.tolist(),
                    (vx, vy, vz),
                    data.site_xpos[world.tcp_site].tolist(),
                    _WORKSPACE_LOW,
                    _WORKSPACE_HIGH,
                    strict=True,
                )
            ]
        )
        yaw = self.target_yaw + yaw_rate * (MAX_YAW_RATE * CONTROL_DT)
        self.target_yaw = min(max(yaw, -YAW_LIMIT), YAW_LIMIT)

        error = pose_error(world, self.target_pos, self.target_yaw)
        mujoco.mj_jacSite(world.model, data, self._jacp, self._jacr, world.tcp_site)
        jac = self._arm_jac
        q = data.qpos[world.arm_qpos]
        posture = POSTURE_GAIN * (HOME_QPOS - q)
        # Null-space posture: dq = posture + J+ (error - J posture), with J+ the damped inverse.
        gram = jac @ jac.T + self._damping
        mujoco.mju_cholFactor(gram, 0.0)
        mujoco.mju_cholSolve(self._step, gram, error - jac @ posture)
        dq = posture + jac.T @ self._step
        data.ctrl[:7] = np.minimum(np.maximum(q + dq, self._qlow), self._qhigh)
        data.ctrl[7:9] = FINGER_OPEN * (1.0 - grip) / 2


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
