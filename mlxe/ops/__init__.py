"""The maths below every other floor: returns (GAE, n-step, V-trace), action distributions in torch
and in NumPy. Imports nothing of the rest of the package."""
