"""STAND-IN for RaveOS's `ravinos` module (m2p sandbox rig): its name only, none of its functions."""
