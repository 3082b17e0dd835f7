"""Write usd_pendulum.usda: a pendulum as a USD physics articulation (UsdPhysics schemas).

Run from anywhere: ``python configs/robots/usd_pendulum/make_usd.py`` (needs usd-core: ``pip install
"forge-gpu[meshes]"``); it writes beside itself. The file is small and committed; this script is how it was made.

The stage is Z-up, in metres and kilograms. ``/pendulum`` is the articulation root: a ``base`` block (0.1 m cube,
1 kg) fixed to the world 1 m up by the joint ``anchor``, and a ``pole`` (a capsule 0.03 m in radius, 0.4 m between
its caps' centres, 0.5 kg) hanging below it on the revolute joint ``hinge`` about y, limited to +-120 degrees.
The physics scene sets the standard gravity.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).parent
BASE_Z = 1.0
"""The base block's centre above the ground [m]."""
HALF = 0.05
"""Half the base block's edge [m]."""
POLE_HALF = 0.25
"""The hinge to the pole's centre [m] (the capsule's top cap ends 0.02 m below the block)."""


def write(path: Path) -> None:
    from pxr import Gf, Usd, UsdGeom, UsdPhysics

    stage = Usd.Stage.CreateNew(str(path))
    UsdGeom.SetStageUpAxis(stage, UsdGeom.Tokens.z)
    UsdGeom.SetStageMetersPerUnit(stage, 1.0)
    UsdPhysics.SetStageKilogramsPerUnit(stage, 1.0)
    stage.SetMetadata("comment", "usd_pendulum, written by make_usd.py")

    scene = UsdPhysics.Scene.Define(stage, "/physicsScene")
    scene.CreateGravityDirectionAttr(Gf.Vec3f(0.0, 0.0, -1.0))
    scene.CreateGravityMagnitudeAttr(9.81)

    root = UsdGeom.Xform.Define(stage, "/pendulum")
    stage.SetDefaultPrim(root.GetPrim())
    UsdPhysics.ArticulationRootAPI.Apply(root.GetPrim())

    def link(name: str, z: float, mass: float) -> UsdGeom.Xform:
        body = UsdGeom.Xform.Define(stage, f"/pendulum/{name}")
        body.AddTranslateOp().Set(Gf.Vec3d(0.0, 0.0, z))
        UsdPhysics.RigidBodyAPI.Apply(body.GetPrim())
        UsdPhysics.MassAPI.Apply(body.GetPrim()).CreateMassAttr(mass)
        return body

    base = link("base", BASE_Z, 1.0)
    block = UsdGeom.Cube.Define(stage, "/pendulum/base/collision")
    block.CreateSizeAttr(2 * HALF)
    block.CreateDisplayColorAttr([Gf.Vec3f(0.3, 0.3, 0.35)])
    UsdPhysics.CollisionAPI.Apply(block.GetPrim())

    pole = link("pole", BASE_Z - HALF - POLE_HALF, 0.5)
    capsule = UsdGeom.Capsule.Define(stage, "/pendulum/pole/collision")
    capsule.CreateAxisAttr(UsdGeom.Tokens.z)
    capsule.CreateRadiusAttr(0.03)
    capsule.CreateHeightAttr(0.4)
    capsule.CreateDisplayColorAttr([Gf.Vec3f(0.85, 0.45, 0.1)])
    UsdPhysics.CollisionAPI.Apply(capsule.GetPrim())

    anchor = UsdPhysics.FixedJoint.Define(stage, "/pendulum/anchor")
    anchor.CreateBody1Rel().SetTargets([base.GetPath()])
    anchor.CreateLocalPos0Attr(Gf.Vec3f(0.0, 0.0, BASE_Z))
    anchor.CreateLocalPos1Attr(Gf.Vec3f(0.0, 0.0, 0.0))

    hinge = UsdPhysics.RevoluteJoint.Define(stage, "/pendulum/hinge")
    hinge.CreateBody0Rel().SetTargets([base.GetPath()])
    hinge.CreateBody1Rel().SetTargets([pole.GetPath()])
    hinge.CreateAxisAttr(UsdPhysics.Tokens.y)
    hinge.CreateLocalPos0Attr(Gf.Vec3f(0.0, 0.0, -HALF))
    hinge.CreateLocalPos1Attr(Gf.Vec3f(0.0, 0.0, POLE_HALF))
    hinge.CreateLowerLimitAttr(-120.0)  # degrees, as UsdPhysics writes angles
    hinge.CreateUpperLimitAttr(120.0)
    stage.GetRootLayer().Save()


if __name__ == "__main__":
    target = HERE / "usd_pendulum.usda"
    target.unlink(missing_ok=True)
    write(target)
    print(f"wrote {target} ({target.stat().st_size} bytes)")
