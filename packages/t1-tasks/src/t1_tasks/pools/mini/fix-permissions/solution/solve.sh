#!/bin/bash
set -euo pipefail
chmod 0755 /app/srv/bin/*.sh
chmod 0644 /app/srv/conf/*
chmod 0700 /app/srv/secrets
chmod 0600 /app/srv/secrets/*
chmod -R o-w /app/srv
