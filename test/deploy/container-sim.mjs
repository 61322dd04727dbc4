// Runs the image's command the way the container would, inside a network namespace of its own
// (started by the test with `unshare -n`), where every default port is free: brings loopback up,
// starts ENTRYPOINT + CMD, waits until the admin endpoint's /ready answers 200 (every server
// serves), runs the HEALTHCHECK command, stops the server with SIGTERM and prints one JSON line:
// { stdout, stderr, healthcheck: exit status, exit: the server's exit status }.
import { spawn, spawnSync } from 'node:child_process';

const job = JSON.parse(process.argv[2]);
const up = spawnSync('ip', ['link', 'set', 'lo', 'up'], { encoding: 'utf8' });
if (up.status !== 0) {
  process.stdout.write(`${JSON.stringify({ error: `ip link set lo up: ${up.stderr}` })}\n`);
  process.exit(1);
}

const env = { ...process.env, ...job.env };
for (const [key, value] of Object.entries(job.env)) if (value === null) delete env[key];
const server = spawn(job.command[0], job.command.slice(1), {
  cwd: job.cwd,
  env,
  stdio: ['ignore', 'pipe', 'pipe'],
});
let stdout = '';
let stderr = '';
server.stdout.on('data', (d) => {
  stdout += d;
});
server.stderr.on('data', (d) => {
  stderr += d;
});
const exited = new Promise((resolve) => server.once('exit', (code, signal) => resolve(code ?? signal)));

async function ready() {
  const deadline = Date.now() + job.readyTimeoutMs;
  while (Date.now() < deadline) {
    if (server.exitCode !== null) return false;
    try {
      const r = await fetch(job.readyUrl);
      if (r.status === 200) return true;
    } catch {
      // not listening yet
    }
    // A wait on the condition (ready answers 200), polled: this script has no test helpers.
    await new Promise((r) => setTimeout(r, 200));
  }
  return false;
}

const result = { stdout: '', stderr: '', ready: await ready(), healthcheck: null, exit: null };
if (result.ready) {
  const check = spawnSync(job.healthcheck[0], job.healthcheck.slice(1), {
    env,
    encoding: 'utf8',
    timeout: 30_000,
  });
  result.healthcheck = check.status;
}
server.kill('SIGTERM');
const timer = setTimeout(() => server.kill('SIGKILL'), 20_000);
result.exit = await exited;
clearTimeout(timer);
result.stdout = stdout;
result.stderr = stderr;
process.stdout.write(`${JSON.stringify(result)}\n`);
