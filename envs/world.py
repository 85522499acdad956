"""The MuJoCo scene: a table, a 7-DoF Franka-Panda-like arm with a parallel gripper, and cubes.

The arm follows the Panda's published kinematics and joint limits (link offsets 0.333, 0.316,
0.0825, 0.384, 0.088, 0.107 m) but is built from primitive geoms, so nothing is downloaded. Only
the contacts that matter are enabled: fingers with blocks, blocks with blocks and blocks with the
table. Everything here is static description plus read-outs of the simulator state.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

from gameon.envs.oracle import BLOCK_SIZE, SceneState

RGBA = {
    "red": "0.85 0.15 0.15 1",
    "green": "0.15 0.7 0.25 1",
    "blue": "0.15 0.3 0.85 1",
    "yellow": "0.9 0.8 0.15 1",
    "purple": "0.55 0.25 0.7 1",
}

CONTROL_DT = 0.05
"""Control period: 20 Hz, as in RGB-stacking."""
PHYSICS_DT = 0.0025
N_SUBSTEPS = round(CONTROL_DT / PHYSICS_DT)

WORKSPACE_LOW = np.array([0.30, -0.25, 0.005])
"""Lower corner of the box the tool-centre point (between the fingertips) is kept in, metres."""
WORKSPACE_HIGH = np.array([0.75, 0.25, 0.40])
BLOCK_AREA_LOW = np.array([0.38, -0.18])
"""Blocks are placed at reset inside this (x, y) rectangle on the table."""
BLOCK_AREA_HIGH = np.array([0.68, 0.18])

HOME_QPOS = np.array([0.0, -0.3, 0.0, -2.2, 0.0, 1.9, np.pi / 4])
"""Arm posture the controller's null-space term pulls toward (hand above the table)."""
FINGER_OPEN = 0.04
"""Finger joint travel: each finger slides 0-4 cm, so the gripper opens to 8 cm."""

_ARM = """
<body name="link0" childclass="robot">
  <geom type="cylinder" size="0.06 0.07" pos="0 0 0.07" class="visual"/>
  <body name="link1" pos="0 0 0.333">
    <joint name="joint1" range="-2.8973 2.8973"/>
    <geom type="capsule" size="0.055" fromto="0 0 -0.19 0 0 0" class="visual"/>
    <body name="link2" quat="1 -1 0 0">
      <joint name="joint2" range="-1.7628 1.7628"/>
      <geom type="capsule" size="0.055" fromto="0 0 0 0 -0.2 0" class="visual"/>
      <body name="link3" pos="0 -0.316 0" quat="1 1 0 0">
        <joint name="joint3" range="-2.8973 2.8973"/>
        <geom type="capsule" size="0.05" fromto="0 0 -0.1 0.08 0 0" class="visual"/>
        <body name="link4" pos="0.0825 0 0" quat="1 1 0 0">
          <joint name="joint4" range="-3.0718 -0.0698"/>
          <geom type="capsule" size="0.05" fromto="-0.08 0 0 -0.08 0.2 0" class="visual"/>
          <body name="link5" pos="-0.0825 0.384 0" quat="1 -1 0 0">
            <joint name="joint5" range="-2.8973 2.8973"/>
            <geom type="capsule" size="0.045" fromto="0 0 -0.2 0 0 0" class="visual"/>
            <body name="link6" quat="1 1 0 0">
              <joint name="joint6" range="-0.0175 3.7525"/>
              <geom type="capsule" size="0.045" fromto="0 0 0 0.088 0 0" class="visual"/>
              <body name="link7" pos="0.088 0 0" quat="1 1 0 0">
                <joint name="joint7" range="-2.8973 2.8973"/>
                <geom type="cylinder" size="0.045 0.04" pos="0 0 0.06" class="visual"/>
                <body name="hand" pos="0 0 0.107" quat="0.9238795 0 0 -0.3826834">
                  <geom name="palm" type="box" size="0.025 0.1 0.025" pos="0 0 0.03" contype="2"
                        conaffinity="1" rgba="0.92 0.92 0.95 1" mass="0.6"/>
                  <site name="tcp" pos="0 0 0.1034" size="0.005" rgba="1 0 0 0"/>
                  <camera name="wrist" pos="0.06 0 0.02" xyaxes="1 0 0 0 -1 0" fovy="75"/>
                  <body name="left_finger" pos="0 0 0.0584">
                    <joint name="finger_left" class="finger" axis="0 1 0"/>
                    <geom type="box" size="0.01 0.006 0.02" pos="0 0.012 0.02" class="visual"/>
                    <geom name="left_pad" type="box" size="0.02 0.005 0.015" pos="0 0.005 0.044"
                          class="pad"/>
                  </body>
                  <body name="right_finger" pos="0 0 0.0584">
                    <joint name="finger_right" class="finger" axis="0 -1 0"/>
                    <geom type="box" size="0.01 0.006 0.02" pos="0 -0.012 0.02" class="visual"/>
                    <geom name="right_pad" type="box" size="0.02 0.005 0.015" pos="0 -0.005 0.044"
                          class="pad"/>
                  </body>
                </body>
              </body>
            </body>
          </body>
        </body>
      </body>
    </body>
  </body>
</body>
"""


def build_xml(colours: tuple[str, ...]) -> str:
    """MJCF text for the scene with one 5 cm cube per colour."""
    half = BLOCK_SIZE / 2
    blocks = "\n".join(
        f'<body name="block_{c}" pos="0.5 {0.1 * i:.2f} {half}">'
        f'<freejoint name="block_{c}"/>'
        f'<geom name="block_{c}" type="box" size="{half} {half} {half}" rgba="{RGBA[c]}"'
        ' class="block"/></body>'
        for i, c in enumerate(colours)
    )
    actuators = "\n".join(
        f'<position name="act{i}" joint="joint{i}" kp="{kp}" kv="{kv}"'
        f' forcerange="-{f} {f}"/>'
        for i, kp, kv, f in [
            (1, 4000, 400, 87), (2, 4000, 400, 87), (3, 3000, 300, 87), (4, 3000, 300, 87),
            (5, 2000, 100, 12), (6, 2000, 100, 12), (7, 2000, 100, 12),
        ]
    )
    return f"""
<mujoco model="gameon_stacking">
  <compiler angle="radian" autolimits="true"/>
  <option timestep="{PHYSICS_DT}" integrator="implicitfast" cone="elliptic" impratio="10">
    <flag energy="disable"/>
  </option>
  <visual>
    <quality shadowsize="0" offsamples="0"/>
    <global offwidth="640" offheight="480"/>
    <headlight ambient="0.45 0.45 0.45" diffuse="0.5 0.5 0.5" specular="0 0 0"/>
  </visual>
  <asset>
    <texture name="grid" type="2d" builtin="checker" rgb1="0.62 0.55 0.45" rgb2="0.58 0.51 0.41"
             width="64" height="64"/>
    <material name="table" texture="grid" texrepeat="8 8"/>
  </asset>
  <default>
    <default class="robot">
      <joint damping="5" armature="0.1"/>
      <default class="visual">
        <geom contype="0" conaffinity="0" group="1" rgba="0.92 0.92 0.95 1"/>
      </default>
      <default class="finger">
        <joint type="slide" range="0 {FINGER_OPEN}" damping="100" armature="0.05"/>
      </default>
      <default class="pad">
        <geom contype="2" conaffinity="1" condim="4" friction="1 0.05 0.001" solref="0.005 1"
              solimp="0.95 0.99 0.001 0.5 2"
              rgba="0.25 0.25 0.28 1" mass="0.02"/>
      </default>
    </default>
    <default class="block">
      <geom contype="1" conaffinity="3" condim="3" friction="0.8 0.02 0.002" solref="0.005 1"
            solimp="0.95 0.99 0.001 0.5 2" density="500"
           />
    </default>
  </default>
  <worldbody>
    <light pos="0.5 0 1.5" dir="0 0 -1" directional="true" castshadow="false"
           diffuse="0.6 0.6 0.6"/>
    <geom name="table" type="plane" size="1 1 0.05" material="table" contype="4"
          conaffinity="1" condim="3" friction="0.6 0.01 0.001"/>
    <camera name="front" pos="1.35 0 0.62" xyaxes="0 1 0 -0.5 0 0.866" fovy="45"/>
    <camera name="top" pos="0.5 0 1.1" xyaxes="0 1 0 -1 0 0" fovy="45"/>
    <body name="robot_base" pos="0 0 0" gravcomp="1">
      {_ARM}
    </body>
    {blocks}
  </worldbody>
  <actuator>
    {actuators}
    <position name="act_left" joint="finger_left" kp="600" forcerange="-15 15"/>
    <position name="act_right" joint="finger_right" kp="600" forcerange="-15 15"/>
  </actuator>
</mujoco>
"""


@dataclass
class World:
    """A compiled scene plus the ids the controller, the oracle and the observations need."""

    model: mujoco.MjModel
    data: mujoco.MjData
    colours: tuple[str, ...]
    arm_qpos: np.ndarray
    """Indices of the 7 arm joints in qpos (and qvel: the arm's joints are hinges)."""
    finger_qpos: np.ndarray
    block_qpos: np.ndarray
    """(n, 7) qpos indices of each block's free joint (position then quaternion)."""
    block_qvel: np.ndarray
    """(n, 6) qvel indices of each block's free joint (linear then angular velocity)."""
    block_geoms: np.ndarray
    tcp_site: int
    left_pad: int
    right_pad: int
    table: int
    robot_geoms: np.ndarray

    @classmethod
    def build(cls, colours: tuple[str, ...]) -> World:
        model = mujoco.MjModel.from_xml_string(build_xml(colours))
        for i in range(model.nbody):
            if model.body(i).name.startswith(("link", "hand", "left_f", "right_f")):
                model.body_gravcomp[i] = 1.0
        data = mujoco.MjData(model)

        def qpos_of(name: str) -> int:
            return int(model.jnt_qposadr[model.joint(name).id])

        def qvel_of(name: str) -> int:
            return int(model.jnt_dofadr[model.joint(name).id])

        robot_bodies = {model.body(n).id for n in ("hand", "left_finger", "right_finger")}
        return cls(
            model=model,
            data=data,
            colours=colours,
            arm_qpos=np.array([qpos_of(f"joint{i}") for i in range(1, 8)]),
            finger_qpos=np.array([qpos_of("finger_left"), qpos_of("finger_right")]),
            block_qpos=np.array([qpos_of(f"block_{c}") + np.arange(7) for c in colours]),
            block_qvel=np.array([qvel_of(f"block_{c}") + np.arange(6) for c in colours]),
            block_geoms=np.array([model.geom(f"block_{c}").id for c in colours]),
            tcp_site=model.site("tcp").id,
            left_pad=model.geom("left_pad").id,
            right_pad=model.geom("right_pad").id,
            table=model.geom("table").id,
            robot_geoms=np.array(
                [g for g in range(model.ngeom) if model.geom_bodyid[g] in robot_bodies]
            ),
        )

    def tcp_pos(self) -> np.ndarray:
        return self.data.site_xpos[self.tcp_site]

    def gripper_opening(self) -> float:
        """Distance between the finger pads' inner faces, metres."""
        return float(self.data.qpos[self.finger_qpos].sum())

    def contact_flags(self) -> tuple[np.ndarray, ...]:
        """Per-block contact flags: table, left pad, right pad, any robot geom, block-block."""
        n = len(self.colours)
        ncon = self.data.ncon
        table = np.zeros(n, bool)
        left = np.zeros(n, bool)
        right = np.zeros(n, bool)
        robot = np.zeros(n, bool)
        blocks = np.zeros((n, n), bool)
        if ncon:
            geom = self.data.contact.geom[:ncon]
            slot = np.full(self.model.ngeom, -1)
            slot[self.block_geoms] = np.arange(n)
            for g1, g2 in geom:
                for a, b in ((g1, g2), (g2, g1)):
                    i = slot[a]
                    if i < 0:
                        continue
                    if b == self.table:
                        table[i] = True
                    elif b == self.left_pad:
                        left[i] = robot[i] = True
                    elif b == self.right_pad:
                        right[i] = robot[i] = True
                    elif slot[b] >= 0:
                        blocks[i, slot[b]] = True
                    elif b in self.robot_geoms:
                        robot[i] = True
        return table, left, right, robot, blocks

    def scene_state(self) -> SceneState:
        """Snapshot of everything the oracle judges, read from the live simulator."""
        qpos, qvel = self.data.qpos, self.data.qvel
        table, left, right, robot, blocks = self.contact_flags()
        return SceneState(
            colours=self.colours,
            block_pos=qpos[self.block_qpos[:, :3]].copy(),
            block_quat=qpos[self.block_qpos[:, 3:]].copy(),
            block_linvel=qvel[self.block_qvel[:, :3]].copy(),
            block_angvel=qvel[self.block_qvel[:, 3:]].copy(),
            tcp_pos=self.tcp_pos().copy(),
            gripper_opening=self.gripper_opening(),
            touches_table=table,
            touches_left_finger=left,
            touches_right_finger=right,
            touches_robot=robot,
            block_contacts=blocks,
        )
