#!/bin/bash
# Creates /app/srv with deliberately wrong permissions.
set -euo pipefail
mkdir -p /app/srv/bin /app/srv/conf /app/srv/secrets /app/srv/uploads
for s in start stop rotate; do printf '#!/bin/bash\necho %s\n' "$s" > /app/srv/bin/$s.sh; done
chmod 0644 /app/srv/bin/start.sh; chmod 0700 /app/srv/bin/stop.sh; chmod 0777 /app/srv/bin/rotate.sh
for c in app db cache; do echo "name=$c" > /app/srv/conf/$c.conf; done
chmod 0666 /app/srv/conf/app.conf; chmod 0600 /app/srv/conf/db.conf; chmod 0644 /app/srv/conf/cache.conf
echo "sk-test-123" > /app/srv/secrets/api.key; echo "hunter2" > /app/srv/secrets/db.password
chmod 0644 /app/srv/secrets/api.key; chmod 0666 /app/srv/secrets/db.password; chmod 0755 /app/srv/secrets
echo "upload" > /app/srv/uploads/a.txt; chmod 0666 /app/srv/uploads/a.txt; chmod 0777 /app/srv/uploads
