"""The MuJoCo scene: a table, a 7-DoF Franka-Panda-like arm with a parallel gripper, and cubes.

The arm follows the Panda's published kinematics and joint limits (link offsets 0.333, 0.316,
0.0825, 0.384, 0.088, 0.107 m) but is built from primitive geoms, so nothing is downloaded. Only
the contacts that matter are enabled: fingers with blocks, blocks with blocks and blocks with the
table. Rendering is kept cheap for software (Mesa llvmpipe) rendering: no shadows, no
multisampling, coarse tessellation and an untextured table, so an 84x84 frame costs about 0.3 ms
on 2 CPU cores. Everything here is static description plus read-outs of the simulator state.
"""

from __future__ import annotations

import math
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
PHYSICS_DT = 0.002
"""Physics step, s: 25 substeps per control step keep cube grasps stiff and stable."""
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


def build_xml(colours: tuple[str, ...], offwidth: int = 640, offheight: int = 480) -> str:
    """MJCF text for the scene with one 5 cm cube per colour (offscreen buffer size in pixels)."""
    half = BLOCK_SIZE / 2
    blocks = "\n".join(
        f'<body name="block_{c}" pos="0.5 {0.1 * i:.2f} {half}">'
        f'<freejoint name="block_{c}"/>'
        f'<geom name="block_{c}" type="box" size="{half} {half} {half}" rgba="{RGBA[c]}"'
        ' class="block"/></body>'
        for i, c in enumerate(colours)
    )
    actuators = "\n".join(
        f'<position name="act{i}" joint="joint{i}" kp="{kp}" kv="{kv}" forcerange="-{f} {f}"/>'
        for i, kp, kv, f in [
            (1, 4000, 400, 87),
            (2, 4000, 400, 87),
            (3, 3000, 300, 87),
            (4, 3000, 300, 87),
            (5, 2000, 100, 12),
            (6, 2000, 100, 12),
            (7, 2000, 100, 12),
        ]
    )
    return f"""
<mujoco model="gameon_stacking">
  <compiler angle="radian" autolimits="true"/>
  <option timestep="{PHYSICS_DT}" integrator="implicitfast" cone="elliptic" impratio="10">
    <flag energy="disable"/>
  </option>
  <visual>
    <quality shadowsize="0" offsamples="0" numslices="8" numstacks="4" numquads="1"/>
    <global offwidth="{offwidth}" offheight="{offheight}"/>
    <headlight ambient="0.45 0.45 0.45" diffuse="0.5 0.5 0.5" specular="0 0 0"/>
  </visual>
  <asset>
    <material name="table" rgba="0.6 0.53 0.43 1"/>
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
    <geom name="table" type="plane" size="1 1 0.5" material="table" contype="4"
          conaffinity="1" condim="3" friction="0.6 0.01 0.001"/>
    <camera name="front" pos="1.25 0 0.85" xyaxes="0 1 0 -0.636 0 0.772" fovy="50"/>
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
    arm_qpos: slice
    """The 7 arm joints in qpos (and in qvel: the arm's joints are hinges)."""
    finger_qpos: slice
    block_qpos: np.ndarray
    """(n, 7) qpos indices of each block's free joint (position then quaternion)."""
    blocks_qpos: slice
    """All blocks' free joints in qpos, block after block (7 numbers each)."""
    blocks_qvel: slice
    """All blocks' free joints in qvel, block after block (6 numbers each)."""
    block_geoms: np.ndarray
    tcp_site: int
    left_pad: int
    right_pad: int
    table: int
    robot_geoms: np.ndarray
    _assembly: StateAssembly

    @classmethod
    def build(cls, colours: tuple[str, ...], offwidth: int = 640, offheight: int = 480) -> World:
        """Compile the scene; the offscreen size bounds the images the renderer can make."""
        model = mujoco.MjModel.from_xml_string(build_xml(colours, offwidth, offheight))
        for i in range(model.nbody):
            if model.body(i).name.startswith(("link", "hand", "left_f", "right_f")):
                model.body_gravcomp[i] = 1.0
        return cls.of_simulator(model, mujoco.MjData(model), colours)

    @classmethod
    def of_simulator(
        cls, model: mujoco.MjModel, data: mujoco.MjData, colours: tuple[str, ...]
    ) -> World:
        """The World of a compiled scene and a state of it: ids, and views of `data`'s arrays."""

        def qpos_of(name: str) -> int:
            return int(model.jnt_qposadr[model.joint(name).id])

        def qvel_of(name: str) -> int:
            return int(model.jnt_dofadr[model.joint(name).id])

        robot_bodies = {model.body(n).id for n in ("hand", "left_finger", "right_finger")}
        robot_geoms = np.array(
            [g for g in range(model.ngeom) if model.geom_bodyid[g] in robot_bodies]
        )
        block_geoms = np.array([model.geom(f"block_{c}").id for c in colours])
        contact_slots = _contact_slot_table(
            model.ngeom,
            block_geoms,
            table=model.geom("table").id,
            pads=(model.geom("left_pad").id, model.geom("right_pad").id),
            robot_geoms=robot_geoms,
        )
        n = len(colours)
        first_block = qpos_of(f"block_{colours[0]}")
        arm = [qpos_of(f"joint{i}") for i in range(1, 8)]
        fingers = [qpos_of("finger_left"), qpos_of("finger_right")]
        blocks = [qpos_of(f"block_{c}") for c in colours]
        if arm != list(range(7)) or fingers != [7, 8] or blocks != list(range(9, 9 + 7 * n, 7)):
            raise RuntimeError("the scene's joints are not laid out as World expects")
        if qvel_of(f"block_{colours[0]}") != 9:
            raise RuntimeError("the scene's velocities are not laid out as World expects")
        return cls(
            model=model,
            data=data,
            colours=colours,
            arm_qpos=slice(0, 7),
            finger_qpos=slice(7, 9),
            block_qpos=np.array([b + np.arange(7) for b in blocks]),
            blocks_qpos=slice(first_block, first_block + 7 * n),
            blocks_qvel=slice(9, 9 + 6 * n),
            block_geoms=block_geoms,
            tcp_site=model.site("tcp").id,
            left_pad=model.geom("left_pad").id,
            right_pad=model.geom("right_pad").id,
            table=model.geom("table").id,
            robot_geoms=robot_geoms,
            _assembly=StateAssembly.build(model, data, colours, contact_slots),
        )

    def __reduce__(self) -> tuple:
        """Copies and pickles rebuild the views of the copied simulator's arrays (a copied view
        would be an array of its own, no longer the simulator's)."""
        return World.of_simulator, (self.model, self.data, self.colours)

    def tcp_pos(self) -> np.ndarray:
        return self.data.site_xpos[self.tcp_site]

    def gripper_opening(self) -> float:
        """Distance between the finger pads' inner faces, metres."""
        left, right = self.data.qpos[self.finger_qpos].tolist()
        return left + right

    def contact_flags(self) -> np.ndarray:
        """(n, 4 + n) bool per block: touches table, left pad, right pad, robot, block j."""
        n = len(self.colours)
        return self.state_vector()[PROPRIO_SIZE:].reshape(n, 17 + n)[:, 13:] > 0.5

    def scene_state(self) -> SceneState:
        """Snapshot of everything the oracle judges, read from the live simulator."""
        return scene_from_state(self.state_vector(), self.colours)

    def unstable(self) -> bool:
        """Whether the simulator raised a warning (bad contact, NaN, ...) since the last reset."""
        return any(self._assembly.warnings.tolist())

    def state_vector(self) -> np.ndarray:
        """The `state` observation: proprioception, then per block pose, velocity and contacts.

        Assembled in a preallocated buffer in a few numpy calls (methods and positional outputs,
        the cheapest calls, since this runs every step); the caller gets its own copy.
        """
        assembly = self._assembly
        state = assembly.state
        xx, _, _, yx, *_ = assembly.tcp_xmat.tolist()
        norm = math.hypot(xx, yx) or 1.0
        left, right = assembly.fingers.tolist()
        np.concatenate(assembly.live, out=assembly.source_values)
        assembly.sources.take(assembly.gather, None, state, "clip")
        if self.data.ncon:
            pairs = self.data.contact.geom.dot(assembly.pair_key)
            state[assembly.contact_slots.take(pairs, 0)] = 1.0
        state[17] = yx / norm
        state[18] = xx / norm
        state[19] = left + right
        return assembly.observed.copy()

    def live_scene(self) -> SceneState:
        """The oracle's scene of the last `state_vector()` call, as views of the world's buffers.

        Cheaper than `scene_state()` but overwritten by the next `state_vector()` call: for a
        caller done with it before then, like the env's step.
        """
        assembly = self._assembly
        np.greater(assembly.state, 0.5, assembly.above_half)
        scene = assembly.scene
        object.__setattr__(scene, "gripper_opening", assembly.state.item(19))  # frozen
        return scene


@dataclass(frozen=True)
class StateAssembly:
    """Buffers and index tables that assemble the state vector in a few numpy calls.

    `sources` holds qpos, qvel, the TCP position and a trailing 0.0; `gather` maps each state
    entry (plus one spare) to its source, the 0.0 for the entries computed or set afterwards.
    """

    sources: np.ndarray
    source_values: np.ndarray
    """`sources` without its trailing 0.0: what the simulator's arrays are copied into."""
    gather: np.ndarray
    contact_slots: np.ndarray
    """(ngeom * ngeom, 4): for a touching geom pair (a, b), row a * ngeom + b holds the `state`
    entries (contact flags) it sets."""
    pair_key: np.ndarray
    """(2,): a contact's geom pair (a, b) dotted with this is a * ngeom + b."""
    state: np.ndarray
    """The state vector being assembled, plus a spare last entry for unused contact slots."""
    observed: np.ndarray
    """`state` without its spare entry: the observation."""
    above_half: np.ndarray
    """`state > 0.5`, entry by entry: the live scene's contact arrays view its contact flags (one
    comparison over the whole contiguous vector is cheaper than one over the strided flags)."""
    scene: SceneState
    """The live scene: its arrays are views of `state` and `above_half`, its gripper opening is
    set by `World.live_scene`."""
    live: tuple[np.ndarray, np.ndarray, np.ndarray]
    """Live views of qpos, qvel and the TCP position: what `source_values` copies."""
    tcp_xmat: np.ndarray
    """Live view of the TCP's orientation matrix (9 entries)."""
    fingers: np.ndarray
    """Live view of the two finger joints' positions."""
    warnings: np.ndarray
    """Live view of the simulator's warning counters."""

    @classmethod
    def build(
        cls,
        model: mujoco.MjModel,
        data: mujoco.MjData,
        colours: tuple[str, ...],
        contact_slots: np.ndarray,
    ) -> StateAssembly:
        """Tables for a scene of these blocks laid out as World.build checks."""
        n = len(colours)
        tcp = model.site("tcp").id
        nq, nv = model.nq, model.nv
        zero = nq + nv + 3
        row = 17 + n
        gather = np.full(state_size(n) + 1, zero)
        gather[0:7] = np.arange(7)
        gather[7:14] = nq + np.arange(7)
        gather[14:17] = nq + nv + np.arange(3)
        for j in range(n):
            start = PROPRIO_SIZE + j * row
            gather[start : start + 7] = 9 + 7 * j + np.arange(7)
            gather[start + 7 : start + 13] = nq + 9 + 6 * j + np.arange(6)
        sources = np.zeros(zero + 1)
        state = np.zeros(len(gather))
        observed = state[:-1]
        above_half = np.zeros(len(state), bool)
        contacts = above_half[PROPRIO_SIZE:-1].reshape(n, row)[:, 13:]
        return cls(
            sources=sources,
            source_values=sources[:-1],
            gather=gather,
            contact_slots=contact_slots,
            pair_key=np.array([model.ngeom, 1], np.int32),
            state=state,
            observed=observed,
            above_half=above_half,
            scene=scene_from_state(observed, colours, contacts),
            live=(data.qpos, data.qvel, data.site_xpos[tcp]),
            tcp_xmat=data.site_xmat[tcp],
            fingers=data.qpos[7:9],
            warnings=data.warning.number,
        )


PROPRIO_SIZE = 7 + 7 + 3 + 3
"""Arm joint positions and velocities, TCP position, sin/cos of hand yaw, gripper opening."""
_TABLE, _LEFT, _RIGHT, _ROBOT = range(4)


def _contact_slot_table(
    ngeom: int,
    block_geoms: np.ndarray,
    table: int,
    pads: tuple[int, int],
    robot_geoms: np.ndarray,
) -> np.ndarray:
    """Lookup from a touching geom pair to the contact flags it raises in the state vector.

    Row a * ngeom + b holds the state indices of the up to four flags the contact (a, b) raises:
    block a touches b (and the robot, if b is a pad), block b touches a (likewise); unused entries
    point one past the state vector, so setting the flags is one numpy operation.
    """
    n = len(block_geoms)
    row = 17 + n
    spare = state_size(n)
    column = {table: _TABLE, pads[0]: _LEFT, pads[1]: _RIGHT}
    column.update({int(g): _ROBOT for g in robot_geoms if g not in pads})
    column.update({int(g): 4 + j for j, g in enumerate(block_geoms)})
    block_of = {int(g): i for i, g in enumerate(block_geoms)}
    slots = np.full((ngeom, ngeom, 4), spare)
    for a in range(ngeom):
        for b in range(ngeom):
            for k, (me, other) in enumerate(((a, b), (b, a))):
                if me in block_of and other in column:
                    flags = PROPRIO_SIZE + block_of[me] * row + 13
                    slots[a, b, 2 * k] = flags + column[other]
                    if other in pads:
                        slots[a, b, 2 * k + 1] = flags + _ROBOT
    return slots.reshape(ngeom * ngeom, 4)


def state_size(n_blocks: int) -> int:
    """Length of the `state` observation for a scene of n blocks."""
    return PROPRIO_SIZE + n_blocks * (7 + 6 + 4 + n_blocks)


def scene_from_state(
    state: np.ndarray, colours: tuple[str, ...], contacts: np.ndarray | None = None
) -> SceneState:
    """Rebuild the oracle's SceneState from a `state` observation (live or recorded).

    The scene's arrays are views of `state` and of `contacts`, an (n, 4 + n) bool array that
    receives the contact flags (a new one if None).
    """
    n = len(colours)
    if state.shape != (state_size(n),):
        raise ValueError(
            f"state vector of shape {state.shape} does not fit a {n}-block scene "
            f"(expected ({state_size(n)},))"
        )
    blocks = state[PROPRIO_SIZE:].reshape(n, 17 + n)
    contacts = np.greater(blocks[:, 13:], 0.5, out=contacts)
    return SceneState(
        colours=colours,
        block_pos=blocks[:, 0:3],
        block_quat=blocks[:, 3:7],
        block_linvel=blocks[:, 7:10],
        block_angvel=blocks[:, 10:13],
        tcp_pos=state[14:17],
        gripper_opening=float(state[19]),
        touches_table=contacts[:, _TABLE],
        touches_left_finger=contacts[:, _LEFT],
        touches_right_finger=contacts[:, _RIGHT],
        touches_robot=contacts[:, _ROBOT],
        block_contacts=contacts[:, 4:],
    )
