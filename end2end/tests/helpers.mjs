import { chromium } from 'playwright-core';

export const BASE = process.env.E2E_BASE_URL ?? 'http://127.0.0.1:3100';
export const USER = process.env.E2E_USER ?? 'e2e';
export const PASSWORD = process.env.E2E_PASSWORD ?? 'e2e-password';
export const ARTIFACTS = process.env.E2E_ARTIFACTS ?? 'test-results';

// Every page of these browsers answers the product's confirmations (Stop, Lock, Delete…) with
// OK, and keeps what they asked in `page.dialogs`, for the tests to check the words.
function acceptDialogs(page) {
  page.dialogs = [];
  page.on('dialog', (dialog) => {
    page.dialogs.push(dialog.message());
    dialog.accept().catch(() => {});
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
export async function hydrated(page) {
  await page.waitForSelector('body[data-hydrated]', { state: 'attached' });
}

export async function signIn(page, user = USER, password = PASSWORD) {
  await page.goto(`${BASE}/login`);
  await hydrated(page);
  await page.getByLabel('User name').fill(user);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
}
