"""The CAD tools (`group:cad`): OpenSCAD models, their lint and their pictures.

Every compile and render runs in its own hardened container of the `openscad` image through
the Executor; the helper inside (`sandbox_images/openscad/navi/cad.py`) confines OpenSCAD
with Landlock to the session workspace. Nothing here runs OpenSCAD, trimesh or matplotlib
on the host.
"""

from runtime.tools.cad.model import Model3DTool, ScadLintTool
from runtime.tools.cad.render import Render3DTool

__all__ = ["Model3DTool", "Render3DTool", "ScadLintTool"]
