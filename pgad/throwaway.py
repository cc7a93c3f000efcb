"""A throwaway PostgreSQL cluster for the demo, the tests and the benchmarks (client side; the server never imports it).

testing.postgresql starts a cluster in a temporary directory on a free port and removes it afterwards. initdb
and postgres refuse to run as root, so as root the cluster's directory is given to the `postgres` OS user and
both programs run as that user through setpriv. Each cluster keeps its compiled kernels in a directory of its own,
<cluster>/kernels (pgad.cache_directory), so no run sees another's.
"""
import os
import pwd
import subprocess

import testing.postgresql

AS_POSTGRES = ['setpriv', '--reuid=postgres', '--regid=postgres', '--init-groups']


def _server_program(name):
    bindir = subprocess.run(['pg_config', '--bindir'], capture_output=True, text=True, check=True).stdout.strip()
    return os.path.join(bindir, name)


class Cluster(testing.postgresql.Postgresql):
    """testing.postgresql.Postgresql, with the root case handled and pgad's settings; server_settings are more
    `-c name=value` settings for the server."""

    def __init__(self, server_settings=None, **settings):
        self.server_settings = server_settings or {}
        settings.setdefault('initdb', _server_program('initdb'))
        settings.setdefault('postgres', _server_program('postgres'))
        settings.setdefault('postgres_args', '-h 127.0.0.1 -F -c logging_collector=off -c shared_buffers=256MB '
                                             '-c max_connections=40')
        super().__init__(**settings)

    def _as_server_user(self, command):
        if os.geteuid() != 0:
            return command
        user = pwd.getpwnam('postgres')
        for root, dirs, files in os.walk(self.base_dir):
            for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
                os.chown(name, user.pw_uid, user.pw_gid)
        os.chmod(self.base_dir, 0o755)
        return AS_POSTGRES + command

    def initialize_database(self):
        if os.path.exists(os.path.join(self.base_dir, 'data', 'PG_VERSION')):
            return
        command = self._as_server_user([self.initdb, '-D', os.path.join(self.base_dir, 'data'), '--lc-messages=C',
                                        '-E', 'UTF8', *self.settings['initdb_args'].split()])
        result = subprocess.run(command, capture_output=True)
        if result.returncode != 0:
            raise RuntimeError(f'initdb failed: {result.stderr.decode()}')

    @property
    def kernels(self):
        """The cluster's pgad.cache_directory."""
        return os.path.join(self.base_dir, 'kernels')

    def get_server_commandline(self):
        settings = {'pgad.cache_directory': self.kernels, **self.server_settings}
        extra = [arg for name, value in settings.items() for arg in ('-c', f'{name}={value}')]
        return self._as_server_user(super().get_server_commandline() + extra)

    def conninfo(self, dbname='test', user='postgres'):
        return f'host=127.0.0.1 port={self.settings["port"]} dbname={dbname} user={user}'
