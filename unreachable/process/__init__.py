"""What /proc says about a target process."""
