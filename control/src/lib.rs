//! zerosplit control stack.
