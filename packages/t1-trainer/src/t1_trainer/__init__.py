"""PPO with a full critic, GAE, warm-up, backends."""
