// The cluster path in a browser: a second server with runtime = "kube" on the simulated cluster
// (scripts/e2e.sh starts both, as root). Launch JupyterLab from the dashboard, and its pod's
// editor answers in the page's frame: a notebook's kernel runs a cell through our proxy to the
// pod's address. The API server (the chart's service account) shows the pod, and none after Stop.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { ARTIFACTS, PASSWORD, hydrated, launchBrowser } from './helpers.mjs';

const CLUSTER = process.env.E2E_CLUSTER_URL;
const KUBECONFIG = process.env.E2E_CLUSTER_KUBECONFIG;

/** The session pods the API server holds, as the server's own account lists them. */
async function sessionPods() {
  const text = readFileSync(KUBECONFIG, 'utf8');
  const server = text.match(/server:\s*(\S+)/)[1];
  const token = text.match(/token:\s*(\S+)/)[1];
  const answer = await fetch(`${server}/api/v1/pods`, { headers: { authorization: `Bearer ${token}` } });
  assert.equal(answer.status, 200, 'the chart lets the server list pods');
  return (await answer.json()).items.filter((p) => !p.metadata.deletionTimestamp);
}

test('a launch on the cluster opens its pod\'s JupyterLab in the page, and a cell runs', { skip: !CLUSTER && 'no simulated cluster (not root)' }, async () => {
  const browser = await launchBrowser();
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  try {
    await page.goto(`${CLUSTER}/login`);
    await page.getByLabel('User name').fill('e2e-cluster');
    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL(`${CLUSTER}/`);
    await hydrated(page);
    await page.getByRole('radio', { name: /JupyterLab/ }).check();
    await page.getByRole('radio', { name: /8 GB/ }).first().check();
    await page.getByRole('button', { name: 'Launch' }).click();
    await page.waitForURL(/\/sessions\/[0-9a-f]+$/);
    const id = page.url().split('/').pop();

    const frame = page.frameLocator('[data-testid=editor-frame]');
    await frame.locator('.jp-LabShell, #jp-main-dock-panel').first().waitFor({ timeout: 120_000 });
    const pods = await sessionPods();
    const pod = pods.find((p) => Object.values(p.metadata.labels ?? {}).includes(id));
    assert.ok(pod, `a pod for session ${id}: ${pods.map((p) => p.metadata.name)}`);
    assert.equal(pod.status.phase, 'Running');
    assert.match(pod.status.podIP, /^198\.19\./, 'the pod has an address of its own');

    await frame.locator('.jp-LauncherCard').first().click({ timeout: 60_000 });
    await frame.getByText(/\(ipykernel\) \| Idle/).first().waitFor({ timeout: 60_000 });
    await frame.locator('.jp-Cell .cm-content').first().click({ timeout: 60_000 });
    await page.keyboard.type('import socket; print(6*7, socket.gethostname())');
    await page.keyboard.press('Shift+Enter');
    const output = frame.locator('.jp-OutputArea-output', { hasText: '42' }).first();
    await output.waitFor({ timeout: 60_000 });
    assert.match(await output.innerText(), new RegExp(`42 ${pod.metadata.name}`), 'the kernel runs in the pod');
    await page.screenshot({ path: `${ARTIFACTS}/cluster-session.png` });

    await hydrated(page);
    await page.getByRole('button', { name: 'Stop' }).click();
    await page.getByTestId('session-ended').waitFor({ timeout: 60_000 });
    for (let i = 0; (await sessionPods()).some((p) => p.metadata.name === pod.metadata.name); i += 1) {
      assert.ok(i < 120, 'the pod goes after Stop');
      await page.waitForTimeout(500);
    }
  } finally {
    await browser.close();
  }
});
