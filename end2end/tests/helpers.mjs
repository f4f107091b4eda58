import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';

export const BASE = process.env.E2E_BASE_URL ?? 'http://127.0.0.1:3100';
export const USER = process.env.E2E_USER ?? 'e2e';
export const PASSWORD = process.env.E2E_PASSWORD ?? 'e2e-password';
export const ARTIFACTS = process.env.E2E_ARTIFACTS ?? 'test-results';

// Every page of these browsers answers the product's confirmations (Stop, Lock, Delete…) with
// OK, and keeps what they asked in `page.dialogs`, for the tests to check the words.
function acceptDialogs(page) {
  if (page.dialogs) return page;
  page.dialogs = [];
  page.on('dialog', (dialog) => {
    page.dialogs.push(dialog.message());
    dialog.accept().catch(() => {});
  });
  // A page script that fails says why in the run's log (a test then fails on what it waited for).
  page.on('pageerror', (error) => console.error(`page error at ${page.url()}: ${error.message}`));
  page.on('console', (message) => {
    if (message.type() === 'error') console.error(`console error at ${page.url()}: ${message.text().slice(0, 2000)}`);
  });
  return page;
}

export async function launchBrowser() {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
    ],
  });
  const newPage = browser.newPage.bind(browser);
  browser.newPage = async (options) => acceptDialogs(await newPage(options));
  const newContext = browser.newContext.bind(browser);
  browser.newContext = async (options) => {
    const context = await newContext(options);
    context.on('page', (page) => {
      if (!page.dialogs) acceptDialogs(page);
    });
    return context;
  };
  return browser;
}

// Waits until the page's wasm has taken over (frontend/src/lib.rs marks the body): typing into a
// server-rendered form before that is lost when hydration attaches the inputs to their signals.
// The mark stays through moves within the app (a sign-in's to the dashboard), whose pages are
// lazy routes: after such a move, wait for the new page's content, not for this.
export async function hydrated(page) {
  await page.waitForSelector('body[data-hydrated]', { state: 'attached' });
}

// Launches a session through the REST API with the page's sign-in, as a script would; asserts
// the launch was accepted and returns the session.
export async function launchByApi(page, { editor = 'marimo', slice_mib = 8192, duration_minutes = 30 } = {}) {
  const [status, launched] = await page.evaluate(async (body) => {
    const answer = await fetch('/api/v1/sessions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    return [answer.status, await answer.json()];
  }, { editor, slice_mib, duration_minutes });
  assert.equal(status, 201, JSON.stringify(launched));
  return launched;
}

// Polls the session until it is ready (about a minute at most); fails if it ends first.
export async function readyByApi(page, id) {
  for (let i = 0; ; i += 1) {
    const state = await page.evaluate(
      async (id) => (await (await fetch(`/api/v1/sessions/${id}`)).json()).state,
      id,
    );
    if (state === 'ready') return;
    assert.ok(i < 240 && state !== 'ended', `the session got ${state}`);
    await page.waitForTimeout(250);
  }
}

export async function signIn(page, user = USER, password = PASSWORD) {
  await page.goto(`${BASE}/login`);
  await hydrated(page);
  await page.getByLabel('User name').fill(user);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
}

// The session page's "Time left", in seconds.
export async function secondsLeft(page) {
  const m = (await page.getByTestId('time-left').innerText()).match(/(\d+):(\d\d)(?::(\d\d))?/);
  return m[3] === undefined ? Number(m[1]) * 60 + Number(m[2]) : Number(m[1]) * 3600 + Number(m[2]) * 60 + Number(m[3]);
}
