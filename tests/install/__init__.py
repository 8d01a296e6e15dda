"""Tests of the install: packaging, a quiet start, the package's layout, the old paths of moved
modules, the README and the docs, and models saved on one TF/Keras stack loaded on another."""
