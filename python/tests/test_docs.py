"""The package documents itself: a docstring on every public name and method, help(weft) that teaches,
type stubs that cover the surface, py.typed, and an example per workload."""

import ast
import os
import pydoc

import weft

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.join(HERE, "..", "weft")


def _public_members(obj):
    for name in dir(obj):
        if name.startswith("_") and name not in ("__dlpack__", "__dlpack_device__", "__array__"):
            continue
        yield name, getattr(obj, name)


def test_every_public_name_has_a_docstring():
    missing = []
    for name in weft.__all__:
        obj = getattr(weft, name)
        if callable(obj) and not (obj.__doc__ or "").strip():
            missing.append(name)
        if isinstance(obj, type) and not issubclass(obj, BaseException):
            for member, value in _public_members(obj):
                if callable(value) or isinstance(value, property) or type(value).__name__ == "getset_descriptor":
                    if not (getattr(value, "__doc__", "") or "").strip():
                        missing.append(f"{name}.{member}")
    assert not missing, missing
    for t in (weft.Tensor, weft.Fabric, weft.GPT):
        for member, value in _public_members(t):
            doc = getattr(type.__getattribute__(t, "__dict__").get(member, value), "__doc__", None)
            assert doc and doc.strip(), f"{t.__name__}.{member}"


def test_help_teaches():
    text = pydoc.render_doc(weft, renderer=pydoc.plaintext)
    for needed in ("lanes", "exact", "numpy.matmul", "dtype=", "from_dlpack", "Fabric", "scope", "GPT",
                   "examples"):
        assert needed in text, needed
    mm = pydoc.render_doc(weft.Fabric.matmul, renderer=pydoc.plaintext)
    assert "1-D operands are promoted" in mm and "copy=False" in mm


def test_stubs_cover_the_surface():
    assert os.path.exists(os.path.join(PKG, "py.typed"))
    with open(os.path.join(PKG, "__init__.pyi")) as f:
        tree = ast.parse(f.read())
    declared = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            declared.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            declared.add(node.target.id)
        elif isinstance(node, ast.Assign):
            declared.update(t.id for t in node.targets if isinstance(t, ast.Name))
    assert set(weft.__all__) <= declared, set(weft.__all__) - declared
    stub_tensor = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Tensor")
    names = {n.name for n in stub_tensor.body if isinstance(n, ast.FunctionDef)}
    assert {"numpy", "__dlpack__", "__matmul__", "T", "shape", "with_contract"} <= names


def test_an_example_per_workload():
    examples = os.path.join(HERE, "..", "examples")
    for name in ("matmul_routing.py", "train_digits.py", "gpt_generate.py"):
        path = os.path.join(examples, name)
        assert os.path.exists(path), name
        with open(path) as f:
            assert ast.get_docstring(ast.parse(f.read())), name
